"""An error message that names an option names the page that describes it (foundation.docs_pages,
appended by foundation.errors.run_entry_point), and every page the table names exists."""

from __future__ import annotations

import pytest

from foundation.docs_pages import COMMAND_PAGES, OPTION_PAGES, existing, named_options, page_for, with_page
from tests.support.helpers import ROOT, assert_one_line_error, run_in_process


def test_every_page_named_exists_and_every_command_has_one():
    from evaluators.protocols.registry import PROTOCOLS

    for pages in [*COMMAND_PAGES.values(), *OPTION_PAGES.values()]:
        assert (ROOT / existing(pages)).is_file(), pages
    for command in [*PROTOCOLS, "run", "explain"]:
        assert f"evaluate.py {command}" in COMMAND_PAGES, command
    assert "train.py" in COMMAND_PAGES


@pytest.mark.parametrize("message, options", [
    ("option device='tpu'; expected 'auto', 'cpu'", ["device"]),
    ("configs/a.yaml: unknown option(s) ['n_inputs', 'k']; expected some of ['seed']", ["n_inputs"]),
    ("evaluate.py roar: one of the arguments --config --resume is required; see evaluate.py roar --help",
     ["config", "resume"]),
    ("Parser key \"model\": Option 'size' is not accepted", ["model", "size"]),
    ("t.csv (option test_path): no columns ['x']", ["test_path"]),
    ("environment variable RELIABLE_EXPLANATIONS_PORTABLE='2'; expected 1 (portable) or 0", []),
    ("runs/x: not found; expected a run folder", []),
])  # fmt: skip
def test_named_options(message, options):
    assert named_options(message)[: len(options)] == options


def test_page_is_the_option_s_own_else_its_command_s():
    assert page_for("--model_class x.Y: cannot import it", "evaluate.py", ["roar", "--config", "c"]) \
        == "docs/your_model.md"
    assert page_for("option device='tpu'", "/any/where/evaluate.py", ["sanity", "--config", "c"]) \
        == "docs/sanity_checks.md"
    assert page_for("option device='tpu'", "evaluate.py", ["--portable", "roar"]) == "docs/roar.md"
    assert page_for("--population.chunk_size 0: expected a positive integer", "train.py", []) \
        == existing(("docs/populations.md", "docs/tabular_population.md"))
    assert existing(("docs/no-such-page.md", "docs/roar.md")) == "docs/roar.md"
    assert page_for("runs/x: not found", "evaluate.py", ["roar"]) is None  # names no option
    assert page_for("option k=0", "tools/table1.py", []) is None  # a tool without a page


def test_with_page_appends_once():
    assert with_page("option k=0; expected k >= 1", "evaluate.py", ["roar"]) \
        == "option k=0; expected k >= 1 (see docs/roar.md)"
    assert with_page("evaluate.py roar: bad --shard; see evaluate.py roar --help", "evaluate.py", ["roar"]) \
        == "evaluate.py roar: bad --shard; see evaluate.py roar --help and docs/roar.md"
    named = "--run x: a model file (docs/your_model.md)"
    assert with_page(named, "evaluate.py", ["roar"]) == named  # names its page already


def test_entry_points_name_the_page(tmp_path):
    result = run_in_process("evaluate.py", "sanity", "--config", "configs/sanity/german.yaml", "--set", "device=tpu")
    assert_one_line_error(result, "option device='tpu'; expected 'auto', 'cpu', 'cuda' or 'cuda:<index>' "
                                  "(see docs/sanity_checks.md)")  # fmt: skip
    result = run_in_process("evaluate.py", "aggregation", "--config", "configs/aggregation/german.yaml",
                            "--model_args", "3")  # fmt: skip
    assert_one_line_error(result, "--model_args 3: expected a YAML mapping, e.g. '{num_classes: 10}' "
                                  "(see docs/your_model.md)")  # fmt: skip
    result = run_in_process("train.py", "--nosuch", "1")
    assert_one_line_error(result, f"see train.py --help and {existing(COMMAND_PAGES['train.py'])}")
