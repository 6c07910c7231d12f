"""The core every front end and the properties stand on: problems, the float64 oracle, the pass
rule, checks, implementations and SDPA adapters, results and provenance helpers."""
