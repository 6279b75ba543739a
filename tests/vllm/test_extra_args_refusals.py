"""The extraArgs rules (cel.owned_flag, and the CRD's CEL rules that mirror it) against the
pinned vLLM's own parser: every spelling that reaches an operator-owned setting is refused,
and nothing vLLM reads as another setting is.

Design: no short options at all (argparse reads `-qfp8` as `-q fp8` and prefixes of
single-dash options too; every vLLM short option has a long form), and no long option whose
key (before `=`, before a dotted JSON key, underscores read as dashes) is a prefix of an owned
flag, of its `--no-` negation, of `--config` (a YAML file of arguments) or `--uds`. The probe
below runs inside vLLM's environment and reports, for every prefix of every long option of
vLLM's parser, what argparse resolves it to; the tests check the rule against that table
rather than against a hand-made list."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vllm_localenv.vllm_server import DEFAULT_VENV, _python
from vllm_operator.api.cel import DENIED_LONG_ARGS, OWNED_ARGS, owned_flag
from vllm_operator.api.spec import Service
from vllm_operator.render.deployment import server_args

pytestmark = pytest.mark.vllm

PROBE = r"""
import contextlib, io, json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

request = json.load(sys.stdin)
parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI server"))
prefixes = {}
for option in list(parser._option_string_actions):
    if not option.startswith("--"):
        continue
    for end in range(3, len(option) + 1):
        p = option[:end]
        if p in prefixes:
            continue
        if p in parser._option_string_actions:
            prefixes[p] = [parser._option_string_actions[p].dest]
        else:
            prefixes[p] = sorted({t[0].dest for t in parser._get_option_tuples(p)})
parsed = {}
for name, args in request["cases"].items():
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(args)
        parsed[name] = {k: repr(v) for k, v in vars(ns).items()}
    except SystemExit:
        parsed[name] = None
dests = {o: a.dest for o, a in parser._option_string_actions.items()}
json.dump({"prefixes": prefixes, "parsed": parsed, "dests": dests}, open(sys.argv[1], "w"))
"""

BASE = Service.from_body(
    {
        "metadata": {"name": "m", "namespace": "ns", "uid": "u"},
        "spec": {"model": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}},
    }
)
# tricks the review found; each must change an owned setting in vLLM (or be refused by it)
TRICKS = {
    "prefix": (["--por=9000"], "port", "9000"),
    "prefix-served-model-name": (["--served-model=x"], "served_model_name", "['x']"),
    "attached-short-option": (["-qfp8"], "quantization", "'fp8'"),
    "dotted-json-key": (["--speculative-config.method=ngram"], "speculative_config", "ngram"),
    "underscores": (["--max_model_len=100"], "max_model_len", "100"),
    "negation-prefix": (["--no-enable-prefix"], "enable_prefix_caching", "False"),
}


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = server_args(BASE.spec)
    cases = {"base": base, **{name: base + extra for name, (extra, _, _) in TRICKS.items()}}
    out = tmp_path_factory.mktemp("probe") / "answer.json"
    res = subprocess.run(
        [str(_python(DEFAULT_VENV)), "-c", PROBE, str(out)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"VLLM_HOST_IP": "127.0.0.1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert res.returncode == 0, res.stderr[-4000:]
    answer: dict[str, Any] = json.loads(out.read_text())
    return answer


def owned_dests(probe: dict[str, Any]) -> set[str]:
    """What vLLM stores the owned flags in (and --config, --uds where this vLLM has them)."""
    return {probe["dests"][f] for f in (*OWNED_ARGS, *DENIED_LONG_ARGS) if f in probe["dests"]}


@pytest.mark.parametrize("name", list(TRICKS))
def test_each_trick_is_real_and_refused(probe: dict[str, Any], name: str) -> None:
    extra, dest, shows = TRICKS[name]
    base, parsed = probe["parsed"]["base"], probe["parsed"][name]
    assert base is not None
    assert parsed is not None, f"vLLM refuses {extra}: not a trick"
    assert parsed[dest] != base[dest]
    assert shows in parsed[dest]
    assert all(owned_flag(a) is not None for a in extra)


def underscored(option: str) -> str:
    """--max-model-len as --max_model_len (vLLM reads underscores in a key as dashes)."""
    return "--" + option[2:].replace("-", "_")


def test_every_spelling_argparse_resolves_to_an_owned_setting_is_refused(
    probe: dict[str, Any],
) -> None:
    owned = owned_dests(probe)
    slipped = {
        prefix: dests
        for prefix, dests in probe["prefixes"].items()
        if len(dests) == 1 and dests[0] in owned  # argparse would take it as that flag
        for spelling in (prefix, f"{prefix}=1", f"{prefix}.key=1", underscored(prefix))
        if owned_flag(spelling) is None
    }
    assert not slipped, f"accepted, yet vLLM reads them as owned flags: {slipped}"


def test_no_spelling_of_another_setting_is_refused(probe: dict[str, Any]) -> None:
    """The positive control: full spellings of vLLM's other long flags all pass."""
    owned = owned_dests(probe)
    refused = sorted(
        option
        for option, dest in probe["dests"].items()
        if option.startswith("--") and dest not in owned and owned_flag(option) is not None
    )
    assert refused == [], refused
    accepted = [o for o, d in probe["dests"].items() if o.startswith("--") and d not in owned]
    assert len(accepted) > 50  # the table is vLLM's, not empty
