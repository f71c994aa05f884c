"""Procedural shell tasks for toolgym/Terminal-v0: a seeded workspace and an instruction that needs the shell.

Each task is built from one integer seed with its own ``random.Random`` (no global RNG, no set or dict order,
no ``hash()``), so a seed gives the same files, instruction, checks and solution on every machine. The
workspace is generated text (application logs, CSV and JSON data, a source tree, configs) of invented names,
so no task is answerable from memory. Six kinds, each at ``level`` 1-3 (more files, nesting, distractors and
steps as the level rises):

==============  ============================================================  ==========================
kind            the instruction asks for                                       judged by
==============  ============================================================  ==========================
log_count       how many ERROR lines of one service (grep, zcat-free)          the answer
csv_total       a column's total or the top group (awk, sort)                  the answer / a report file
todo_files      the files holding a marker, sorted (find, grep -l, sort)       a file's lines
top_ips         the most frequent IPs in an access log (sort | uniq -c)        a file's lines
config_edit     a setting changed in every config that has it (sed)            the files' final text
permissions     scripts made executable, a secret made private (chmod)         the files' modes (+ text)
archive         a tar.gz of the JSON files under data/ (tar)                   the archive's member names
==============  ============================================================  ==========================

``task.data`` holds the files (``files``), what the verifier checks (``checks``, see
:mod:`toolgym.envs.terminal`) and the solution (``solution``: bash commands, then the answer).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable

from toolgym.core.task import Task

LEVELS = (1, 2, 3)
SERVICES = ("auth", "billing", "search", "gateway", "mailer", "scheduler", "catalog", "reports")
WORDS = (
    "timeout", "retry", "cache", "queue", "token", "session", "upstream", "payload", "index", "shard",
    "quota", "ledger", "socket", "worker", "lease", "batch", "cursor", "digest", "bucket", "replica",
)  # fmt: skip
REGIONS = ("north", "south", "east", "west", "central", "coastal")
PRODUCTS = ("anvil", "bolt", "crate", "dynamo", "ember", "flange", "gasket", "hinge")
LANGS = ((".py", "# "), (".js", "// "), (".sh", "# "), (".go", "// "))
DIRS = ("core", "api", "util", "jobs", "web", "store")


def _stamp(rng: random.Random, day: int) -> str:
    return f"2031-03-{day:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z"


def _log_lines(rng: random.Random, n: int, day: int) -> list[str]:
    lines = []
    for _ in range(n):
        level = rng.choices(("INFO", "DEBUG", "WARN", "ERROR"), (6, 3, 2, 2))[0]
        service = rng.choice(SERVICES)
        words = " ".join(rng.sample(WORDS, 3))
        lines.append(f"{_stamp(rng, day)} {level} {service}: {words} id={rng.randrange(10_000, 99_999)}")
    return lines


def _out_name(rng: random.Random, stems: tuple[str, ...], ext: str) -> str:
    """A file name for the task's output, so the same kind reads differently from seed to seed."""
    return f"{rng.choice(stems)}-{rng.randrange(10, 100)}{ext}"


def _log_count(rng: random.Random, level: int) -> dict:
    service = rng.choice(SERVICES)
    severity = rng.choice(("ERROR", "WARN"))
    logs = rng.choice(("logs", "log", "var/log"))
    files: dict[str, str] = {}
    total = 0
    n_files = (1, 3, 5)[level - 1]
    for i in range(n_files):
        folder = logs if level < 3 else f"{logs}/{rng.choice(('node-a', 'node-b', 'node-c'))}"
        lines = _log_lines(rng, rng.randrange(40, 90) * level, day=1 + i)
        if level == 3:  # distractors: the service named in the text of other services' lines
            lines += [
                f"{_stamp(rng, 1 + i)} {severity} gateway: upstream {service} slow id=1" for _ in range(2)
            ]
        name = f"{folder}/app-{i + 1}.log"
        while name in files:
            name = name.replace(".log", "x.log")
        files[name] = "\n".join(lines) + "\n"
        total += sum(1 for line in lines if f" {severity} {service}: " in line)
    files["README.md"] = "Application logs of the last days, one file per day and node.\n"
    where = f"{logs}/" if level < 3 else f"{logs}/ (and its subdirectories)"
    prompt = (
        f"How many {severity} lines did the service '{service}' log in total across the .log files under "
        f"{where}? A line is 'TIMESTAMP LEVEL SERVICE: MESSAGE'. Answer with the number only."
    )
    solution = [f"find {logs} -name '*.log' -exec cat {{}} + | grep -c ' {severity} {service}: '"]
    return {"prompt": prompt, "files": files, "checks": [{"kind": "answer", "expected": str(total)}],
            "solution": solution, "answer": str(total)}  # fmt: skip


def _csv_total(rng: random.Random, level: int) -> dict:
    rows = []
    for i in range(rng.randrange(30, 60) * level):
        rows.append((f"o{1000 + i}", rng.choice(REGIONS), rng.choice(PRODUCTS), rng.randrange(1, 500)))
    header = "order_id,region,product,amount"
    text = header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n"
    sales = f"data/{rng.choice(('sales', 'orders', 'invoices'))}-{rng.randrange(2020, 2031)}.csv"
    files = {sales: text, "data/NOTES.txt": "amount is in whole euros\n"}
    totals: Counter[str] = Counter()
    for _, region, _, amount in rows:
        totals[region] += amount
    checks: list[dict[str, object]]
    if level == 1:
        region = rng.choice(sorted(totals))
        prompt = f"What is the total amount of the orders of region '{region}' in {sales}? Number only."
        solution = [f"awk -F, '$2==\"{region}\" {{s+=$4}} END {{print s}}' {sales}"]
        answer = str(totals[region])
        checks = [{"kind": "answer", "expected": answer}]
    elif level == 2:
        best = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        prompt = f"Which region has the largest total amount in {sales}? Answer with the region's name."
        solution = [
            f"awk -F, 'NR>1 {{s[$2]+=$4}} END {{for (r in s) print s[r], r}}' {sales} "
            "| sort -k1,1nr -k2 | head -1"
        ]
        answer = best
        checks = [{"kind": "answer", "expected": best}]
    else:
        ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
        out = _out_name(rng, ("report", "totals", "summary", "by-region"), ".txt")
        lines = [f"{region} {total}" for region, total in ranked]
        prompt = (
            f"Write {out} with one line per region of {sales}, 'REGION TOTAL' (the sum of "
            "amount), largest total first (ties by name). Then answer 'done'."
        )
        solution = [
            f"awk -F, 'NR>1 {{s[$2]+=$4}} END {{for (r in s) print r, s[r]}}' {sales} | sort -k2,2nr -k1,1 "
            f"> {out}"
        ]
        answer = "done"
        checks = [{"kind": "lines", "path": out, "expected": lines}]
    return {"prompt": prompt, "files": files, "checks": checks, "solution": solution, "answer": answer}


def _source_tree(rng: random.Random, level: int, marker: str) -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    hits = []
    for i in range(6 * level + rng.randrange(4)):
        ext, comment = rng.choice(LANGS)
        depth = rng.randrange(1, level + 1)
        path = "src/" + "/".join(rng.choice(DIRS) for _ in range(depth)) + f"/mod{i}{ext}"
        body = [f"{comment}module {i}"] + [f"x{j} = {rng.randrange(100)}" for j in range(rng.randrange(3, 9))]
        if rng.random() < 0.45:
            body.insert(rng.randrange(1, len(body)), f"{comment}{marker}: {rng.choice(WORDS)}")
            hits.append(path)
        elif level > 1 and rng.random() < 0.3:  # a near miss
            body.insert(1, f"{comment}{marker.lower()}s are tracked elsewhere")
        files[path] = "\n".join(body) + "\n"
    if not hits:
        path = sorted(files)[0]
        files[path] += f"# {marker}: {rng.choice(WORDS)}\n"
        hits.append(path)
    return files, sorted(set(hits))


def _todo_files(rng: random.Random, level: int) -> dict:
    marker = rng.choice(("TODO", "FIXME", "XXX"))
    files, hits = _source_tree(rng, level, marker)
    out = _out_name(rng, ("todo", "open-items", "markers", "worklist"), ".txt")
    prompt = (
        f"List every file under src/ that contains the marker '{marker}:' (case-sensitive, with the colon), "
        f"one path per line as 'src/...', sorted, in {out}. Then answer with how many files you listed."
    )
    solution = [f"grep -rl '{marker}:' src | sort > {out}", f"wc -l < {out}"]
    checks = [
        {"kind": "lines", "path": out, "expected": hits},
        {"kind": "answer", "expected": str(len(hits))},
    ]
    return {
        "prompt": prompt,
        "files": files,
        "checks": checks,
        "solution": solution,
        "answer": str(len(hits)),
    }


def _top_ips(rng: random.Random, level: int) -> dict:
    ips = [
        f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}" for _ in range(8 + 4 * level)
    ]
    weights = [rng.randrange(1, 40) for _ in ips]
    lines: list[str] = []
    counts: Counter[str] = Counter()
    for _ in range(150 * level):
        ip = rng.choices(ips, weights)[0]
        status = rng.choice((200, 200, 200, 301, 404, 500))
        lines.append(
            f'{ip} - - [01/Mar/2031:10:00:00 +0000] "GET /{rng.choice(WORDS)} HTTP/1.1" {status} 512'
        )
        if level < 3 or status == 404:
            counts[ip] += 1
    k = rng.randrange(3, 6)
    out = _out_name(rng, ("top", "busiest", "heavy-hitters"), ".txt")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    expected = [f"{n} {ip}" for ip, n in ranked]
    which = "requests" if level < 3 else "requests answered with status 404"
    prompt = (
        f"Find the {k} IP addresses with the most {which} in access.log. Write them to {out}, one per "
        f"line as 'COUNT IP', most first (ties: IP in plain text order). Then answer 'done'."
    )
    grep = "" if level < 3 else " | awk '$9==404'"
    solution = [
        f"cat access.log{grep} | awk '{{print $1}}' | sort | uniq -c | awk '{{print $1, $2}}' "
        f"| sort -k1,1nr -k2,2 | head -{k} > {out}"
    ]
    files = {"access.log": "\n".join(lines) + "\n"}
    if level > 1:
        files["access.log.1"] = "\n".join(lines[: 20 * level]) + "\n"  # yesterday's: not asked for
    checks = [{"kind": "lines", "path": out, "expected": expected}]
    return {"prompt": prompt, "files": files, "checks": checks, "solution": solution, "answer": "done"}


def _config_edit(rng: random.Random, level: int) -> dict:
    old_host = f"db-{rng.choice(WORDS)}-{rng.randrange(1, 9)}"
    new_host = f"db-{rng.choice(WORDS)}-{rng.randrange(10, 99)}"
    files: dict[str, str] = {}
    expected: dict[str, str] = {}
    for i, service in enumerate(rng.sample(SERVICES, 2 + 2 * level)):
        uses = i == 0 or rng.random() < 0.6
        host = old_host if uses else f"db-{service}"
        lines = [f"[{service}]", f"port = {rng.randrange(8000, 9000)}", f"db_host = {host}", "timeout = 30"]
        if level > 1:
            lines.append(f"# previously {old_host}-backup, kept for reference")
        folder = "config" if level < 3 else f"config/{rng.choice(('prod', 'staging'))}"
        path = f"{folder}/{service}.ini"
        files[path] = "\n".join(lines) + "\n"
        expected[path] = files[path].replace(f"db_host = {old_host}\n", f"db_host = {new_host}\n")
    prompt = (
        f"The database host {old_host} was renamed {new_host}. Change the 'db_host' setting in every .ini "
        f"file under config/ that uses {old_host}; change nothing else (comments included). Then answer "
        f"'done'."
    )
    solution = [
        f"grep -rl 'db_host = {old_host}$' config "
        f"| xargs sed -i 's/^db_host = {old_host}$/db_host = {new_host}/'"
    ]
    checks = [{"kind": "text", "path": p, "expected": t} for p, t in sorted(expected.items())]
    return {"prompt": prompt, "files": files, "checks": checks, "solution": solution, "answer": "done"}


def _permissions(rng: random.Random, level: int) -> dict:
    files: dict[str, str] = {}
    scripts = sorted({f"bin/{rng.choice(WORDS)}-{i}.sh" for i in range(1 + level)})
    for path in scripts:
        files[path] = f"#!/bin/sh\necho {path}\n"
    files["bin/README"] = "helper scripts\n"
    secret = f"secrets/{rng.choice(SERVICES)}.key"
    files[secret] = f"key-{rng.randrange(10**8, 10**9)}\n"
    checks: list[dict] = [{"kind": "mode", "path": p, "mask": 0o100, "expected": 0o100} for p in scripts]
    checks.append({"kind": "mode", "path": "bin/README", "mask": 0o111, "expected": 0})
    checks.append({"kind": "mode", "path": secret, "mask": 0o777, "expected": 0o600})
    steps = ["chmod +x bin/*.sh", f"chmod 600 {secret}"]
    ask = [
        "make every .sh script under bin/ executable (leave bin/README alone)",
        f"make {secret} readable and writable by its owner only (mode 600)",
    ]
    if level == 3:
        out = "bin/all.txt"
        ask.append(f"run every script of bin/ in name order and save their combined output in {out}")
        steps.append(f"for s in bin/*.sh; do ./$s; done > {out}")
        checks.append({"kind": "lines", "path": out, "expected": scripts})
    prompt = "In the workspace: " + "; ".join(ask) + ". Then answer 'done'."
    return {"prompt": prompt, "files": files, "checks": checks, "solution": steps, "answer": "done"}


def _archive(rng: random.Random, level: int) -> dict:
    files: dict[str, str] = {}
    archive = _out_name(rng, ("backup", "export", "bundle", "snapshot"), ".tar.gz")
    ext = rng.choice((".json", ".csv"))
    wanted = []
    for i in range(3 * level + rng.randrange(3)):
        folder = "data" if level == 1 else "data/" + rng.choice(("2029", "2030", "raw"))
        kind = rng.choice((ext, ext, ".txt"))
        path = f"{folder}/{rng.choice(PRODUCTS)}-{i}{kind}"
        content = json.dumps(
            {"id": i, "product": rng.choice(PRODUCTS), "qty": rng.randrange(100)}, sort_keys=True
        )
        files[path] = {".json": content + "\n", ".csv": "id,qty\n1,2\n"}.get(kind, "notes\n")
        if kind == ext:
            wanted.append(path)
    if not wanted:
        files[f"data/extra{ext}"] = "\n"
        wanted.append(f"data/extra{ext}")
    prompt = (
        f"Create {archive}, a gzip-compressed tar archive holding every {ext} file under data/ (and only "
        "those files), stored with their paths relative to the workspace (data/...). Then answer 'done'."
    )
    solution = [f"find data -name '*{ext}' | sort | tar -czf {archive} -T -"]
    checks = [{"kind": "tar", "path": archive, "expected": sorted(wanted)}]
    return {"prompt": prompt, "files": files, "checks": checks, "solution": solution, "answer": "done"}


KINDS: dict[str, Callable[[random.Random, int], dict]] = {
    "log_count": _log_count,
    "csv_total": _csv_total,
    "todo_files": _todo_files,
    "top_ips": _top_ips,
    "config_edit": _config_edit,
    "permissions": _permissions,
    "archive": _archive,
}


def generate_terminal_task(seed: int, level: int = 1, kinds: tuple[str, ...] = tuple(KINDS)) -> Task:
    """The task for ``seed`` at ``level``: its kind is drawn from ``kinds`` by the seed as well."""
    rng = random.Random(f"terminal-{level}-{seed}")
    kind = kinds[rng.randrange(len(kinds))]
    spec = KINDS[kind](rng, level)
    if not any(check["kind"] == "answer" for check in spec["checks"]):  # the final answer the prompt asks for
        spec["checks"].append({"kind": "answer", "expected": spec["answer"]})
    prompt = (
        f"{spec['prompt']}\n\nYou work in a bash shell whose working directory holds the task's files; give "
        f"the final answer when you are done."
    )
    return Task(
        id="",
        prompt=prompt,
        answer=spec["answer"],
        data={
            "kind": kind,
            "level": level,
            "files": dict(sorted(spec["files"].items())),
            "checks": spec["checks"],
            "solution": spec["solution"],
        },
    )
