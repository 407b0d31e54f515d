"""The benchmark suite behind ``octopt bench`` and ``bench/step.py`` (entry point: ``step_cmd``); see
bench/README.md. Nothing is imported here, so ``python -m octopt._bench.memory`` starts clean."""
