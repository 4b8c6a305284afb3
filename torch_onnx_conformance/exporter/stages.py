"""Stage names: the one vocabulary for the steps an export and its check go through.

The exporter records its own steps (``ExportRecord.status``: capture … optimize, then verify's
checker … second-shape); a conformance case sees the four export steps as one, ``export``, and
its result rows, expectations files and reports name the failing stage with the same words.
"""

from __future__ import annotations

import enum


class Stage(str, enum.Enum):
    CAPTURE = "capture"
    DECOMPOSITION = "decomposition"
    TRANSLATION = "translation"
    OPTIMIZE = "optimize"
    #: capture, decomposition, translation and optimize as one step: ``export()`` seen from outside
    EXPORT = "export"
    CHECKER = "checker"
    LOAD = "load"
    RUN = "run"
    COMPARE = "compare"
    SECOND_SHAPE = "second-shape"

    def __str__(self) -> str:
        # A stage is written into rows, file names and messages as its plain name.
        return self.value


#: What ``ExportRecord.status`` can hold, in order.
RECORD_STAGES = (
    Stage.CAPTURE,
    Stage.DECOMPOSITION,
    Stage.TRANSLATION,
    Stage.OPTIMIZE,
    Stage.CHECKER,
    Stage.LOAD,
    Stage.RUN,
    Stage.COMPARE,
    Stage.SECOND_SHAPE,
)
#: The stages ``verify=True`` adds after the export.
VERIFY_STAGES = RECORD_STAGES[4:]
#: The stages a conformance case can fail at, in order: result rows, expectations, reports.
CASE_STAGES = (Stage.EXPORT, *VERIFY_STAGES)

#: Names the exporter's records used before the vocabulary was shared: read wherever a stage
#: name may come from an older file (repro folders, report names).
FORMER_NAMES = {
    "ort_load": Stage.LOAD,
    "ort_run": Stage.RUN,
    "accuracy": Stage.COMPARE,
    "second_shape_accuracy": Stage.SECOND_SHAPE,
}


def stage_named(name: str) -> Stage:
    """The stage a name written now or by an earlier version means; ValueError otherwise."""
    if name in FORMER_NAMES:
        return FORMER_NAMES[name]
    try:
        return Stage(name)
    except ValueError:
        raise ValueError(
            f"unknown stage {name!r}; choose one of {', '.join(s.value for s in Stage)}"
        ) from None
