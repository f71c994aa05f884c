"""``import toolgym`` and building the CLI never import openenv (or FastMCP, which it pulls in): the OpenEnv
server is an optional extra, loaded only by ``toolgym serve openenv`` and ``toolgym export openenv``."""

import subprocess
import sys


def test_toolgym_and_the_cli_do_not_import_openenv():
    code = (
        "import sys, toolgym, toolgym.cli, toolgym.server.openenv, toolgym.server.openenv_export\n"
        "toolgym.cli._build_parser()\n"
        "print(sorted(m for m in ('openenv', 'fastmcp', 'mcp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
