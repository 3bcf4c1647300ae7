"""Tests of webui/batch/, by its packages: asserts/, promptfoo/, run/."""
