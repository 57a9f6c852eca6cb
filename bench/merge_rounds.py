"""Merge the hyperfine --export-json files of interleaved rounds (bench/lib.sh `rounds`)
into one of the same shape: each command's times and exit codes over all the rounds."""

import json
import sys

merged = {}
for path in sys.argv[1:]:
    with open(path) as stream:
        for result in json.load(stream)["results"]:
            times = result["times"]
            entry = merged.setdefault(result["command"], {"times": [], "exit_codes": []})
            entry["times"] += times
            entry["exit_codes"] += result.get("exit_codes") or [0] * len(times)
results = [{"command": command, **entry} for command, entry in merged.items()]
json.dump({"results": results}, sys.stdout)
