"""Diagnostics: comparing ONNX outputs with a reference, second input shapes, verification,
bisection, repro directories and reports. Each module returns data or renders it."""
