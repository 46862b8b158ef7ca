"""The gate: ``hfexport check`` selects the model classes a change touched, exports them on every backend in
isolated jobs, compares with eager, tells new failures from pre-existing ones, and writes the reports."""
