"""Write toolgym/swe/data/swebench_specs.json from the SWE-bench harness's per-(repository, version) specs.

SWE-bench published how each of its repositories is installed, per version, as ``MAP_REPO_VERSION_TO_SPECS``
in its ``swebench`` package up to 4.x (5.x moved the specs into the datasets). toolgym keeps them as a data
file rather than an optional dependency: swebench 4.1.0 requires docker, modal, ghapi and pre-commit, which a
container-free install has no use for. The file holds facts about the datasets (which Python, which packages,
which install command, where the requirements file lies), with their source and licence (MIT) in its header.

Run once per swebench release that changes them:

    pip download --no-deps swebench==4.1.0 -d /tmp/swb
    python scripts/swebench_specs.py /tmp/swb/swebench-4.1.0-py3-none-any.whl

The constants module is plain data (no imports): it is executed from the wheel alone, never installed.
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "toolgym" / "swe" / "data" / "swebench_specs.json"
MODULE = "swebench/harness/constants/python.py"
PARSERS = "swebench/harness/log_parsers/python.py"
KEYS = ("python", "packages", "pip_packages", "pre_install", "install", "test_cmd", "env_vars", "no_use_env")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", help="the swebench 4.x wheel")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    with zipfile.ZipFile(args.wheel) as wheel:
        version = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")).split("/")[0]
        namespace: dict = {}
        exec(compile(wheel.read(MODULE).decode(), MODULE, "exec"), namespace)
        parsers_src = wheel.read(PARSERS).decode()
    specs = namespace["MAP_REPO_VERSION_TO_SPECS_PY"]
    # the log parser each repository's rows were graded with: how their test ids were written
    parser_of = {}
    for line in parsers_src.split("MAP_REPO_TO_PARSER_PY = {", 1)[1].split("}", 1)[0].splitlines():
        if ":" in line:
            repo, name = (part.strip().strip(",").strip('"') for part in line.split(":", 1))
            parser_of[repo] = name.removeprefix("parse_log_")
    aliases = {}  # parse_log_astropy = parse_log_pytest_v2, ...
    for line in parsers_src.splitlines():
        if line.startswith("parse_log_") and " = parse_log_" in line:
            left, right = line.split(" = ")
            aliases[left.removeprefix("parse_log_")] = right.strip().removeprefix("parse_log_")
    data = {
        "source": f"SWE-bench harness constants ({version.removesuffix('.dist-info')}: {MODULE}, "
        "MAP_REPO_VERSION_TO_SPECS_PY, MAP_REPO_TO_REQS_PATHS, MAP_REPO_TO_ENV_YML_PATHS; "
        f"{PARSERS}: MAP_REPO_TO_PARSER_PY)",
        "licence": "MIT (Copyright (c) 2023 Carlos E Jimenez, John Yang, Alexander Wettig, Shunyu Yao, "
        "Kexin Pei, Ofir Press, Karthik R Narasimhan)",
        "replace_packages": [["types-pkg_resources", "types-setuptools"]],
        "reqs_paths": namespace["MAP_REPO_TO_REQS_PATHS"],
        "env_yml_paths": namespace["MAP_REPO_TO_ENV_YML_PATHS"],
        "log_parsers": {repo: aliases.get(name, name) for repo, name in parser_of.items()},
        "specs": {
            repo: {v: {k: spec[k] for k in KEYS if k in spec} for v, spec in versions.items()}
            for repo, versions in sorted(specs.items())
        },
    }
    Path(args.out).write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    count = sum(len(v) for v in specs.values())
    print(f"{args.out}: {count} (repository, version) specs of {len(specs)} repositories")


if __name__ == "__main__":
    main()
