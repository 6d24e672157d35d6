#!/usr/bin/env python3
"""Reads govulncheck's JSON stream (-format json) and reports the vulnerabilities our code
calls: those in modules we require fail (exit 1); those in the Go standard library are listed
with the Go release that fixes them and do not fail, since the toolchain is the machine's.
Findings that are only imported or required, never called, are not reported."""
import json
import sys


def objects(text):
    """Yields the JSON objects of a stream of concatenated objects."""
    dec, i = json.JSONDecoder(), 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return
        obj, i = dec.raw_decode(text, i)
        yield obj


def main(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    summaries, called = {}, {}
    for obj in objects(text):
        if "osv" in obj:
            osv = obj["osv"]
            summaries[osv["id"]] = osv.get("summary", "")
        finding = obj.get("finding")
        if not finding or not finding.get("trace") or "function" not in finding["trace"][0]:
            continue  # imported or required, not called
        top = finding["trace"][0]
        called[(finding["osv"], top.get("module", "?"))] = (top.get("version", "?"), finding.get("fixed_version", "none"))
    modules = sorted(k for k in called if k[1] != "stdlib")
    stdlib = sorted(k for k in called if k[1] == "stdlib")
    for osv, mod in stdlib:
        version, fixed = called[(osv, mod)]
        print(f"govulncheck: standard library {osv} ({summaries.get(osv, '')}): Go {version}, fixed in {fixed}: not failing (the machine's toolchain)")
    for osv, mod in modules:
        version, fixed = called[(osv, mod)]
        print(f"govulncheck: {mod}@{version} {osv} ({summaries.get(osv, '')}): fixed in {fixed}")
    print(f"govulncheck: {len(modules)} called vulnerabilities in modules, {len(stdlib)} in the standard library")
    return 1 if modules else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
