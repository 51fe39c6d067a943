#!/usr/bin/env python3
"""Validates an /api/status document against cohort/dashboard/status.schema.json.

usage: validate_status.py SCHEMA STATUS_JSON_FILE
Exits 0 when valid, 1 with the first error on stderr, 77 when the jsonschema
module is missing (python3-jsonschema; scripts/bootstrap.sh installs it).
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("validate_status.py: python3-jsonschema is not installed", file=sys.stderr)
    sys.exit(77)

with open(sys.argv[1]) as f:
    schema = json.load(f)
with open(sys.argv[2]) as f:
    status = json.load(f)
jsonschema.Draft7Validator.check_schema(schema)
errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(status), key=lambda e: list(e.path))
for e in errors[:5]:
    print("status%s: %s" % ("".join("[%r]" % p for p in e.path), e.message), file=sys.stderr)
sys.exit(1 if errors else 0)
