"""Small real models for the advice rules' tests: each trigger model has a fixed twin."""
