"""The README stays a front door, and no link in it or in docs/ leads nowhere."""
import glob
import importlib.util
import os
import re

import pytest

from conftest import REPO

README = os.path.join(REPO, "README.md")
PAGES = [README] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
MAX_README_LINES = 220  # issue 13: "at most about 200 lines"

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")


def links(markdown: str) -> list[str]:
  """Targets of the relative links and images, outside code; web and mail addresses left out."""
  prose = _CODE.sub("", _FENCE.sub("", markdown))
  return [t for t in _LINK.findall(prose) if not re.match(r"[a-z]+:", t)]


def slug(heading: str) -> str:
  """GitHub's anchor of a heading: link text kept, lower case, punctuation dropped, spaces to '-'."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
  return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
  return {slug(h) for h in re.findall(r"^#+ (.+)$", _FENCE.sub("", markdown), re.M)}


def broken_links(path: str) -> list[str]:
  """The links of the Markdown file at path whose file, or heading in a .md file, does not exist."""
  with open(path) as fh:
    text = fh.read()
  broken = []
  for target in links(text):
    file, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
    if not os.path.exists(resolved):
      broken.append(target)
    elif anchor and resolved.endswith(".md"):
      with open(resolved) as fh:
        if anchor not in anchors(fh.read()):
          broken.append(target)
  return broken


@pytest.mark.parametrize("markdown, expected", [
    ("see [setup](docs/setup.md) and [Horovod](https://horovod.ai)", ["docs/setup.md"]),
    ("![figure](results/a.png) [top](#layout) [mail](mailto:a@b.c)", ["results/a.png", "#layout"]),
    ("[a](x.md#part) `[not](a-link.md)`\n```\n[nor](this.md)\n```\n", ["x.md#part"]),
    ("[1,0]<stderr>: and --opt=A[,mpi|ring]", []),
])
def test_links(markdown, expected):
  assert links(markdown) == expected


@pytest.mark.parametrize("heading, expected", [
    ("Slurm", "slurm"),
    ("On the emulated cluster: `make bench-scaling`", "on-the-emulated-cluster-make-bench-scaling"),
    ("[flags/data.py](../flags/data.py)", "flagsdatapy"),
    ("Communication: fusion, flat / hierarchical / hybrid allreduce",
     "communication-fusion-flat--hierarchical--hybrid-allreduce"),
])
def test_slug(heading, expected):
  assert slug(heading) == expected


def test_broken_links_are_found(tmp_path):
  (tmp_path / "there.md").write_text("# A heading\n")
  page = tmp_path / "page.md"
  page.write_text("[ok](there.md) [ok](there.md#a-heading) [gone](missing.md) "
                  "[no heading](there.md#another) [here](#title)\n# Title\n")
  assert broken_links(str(page)) == ["missing.md", "there.md#another"]


def test_readme_is_short():
  with open(README) as fh:
    lines = len(fh.readlines())
  assert lines < MAX_README_LINES, f"README.md has {lines} lines; move details into docs/"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: os.path.relpath(p, REPO))
def test_relative_links_resolve(path):
  assert not broken_links(path), f"{os.path.relpath(path, REPO)} links to what does not exist"


@pytest.fixture(scope="module")
def flag_table():
  spec = importlib.util.spec_from_file_location("flag_table", os.path.join(REPO, "scripts", "flag_table.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("text, expected", [
    ("plain", "plain"),
    ("<fp32|bf16>: arithmetic", "\\<fp32\\|bf16>: arithmetic"),
    ("train/<wnid>/*.JPEG and val/<wnid>/*.JPEG", "train/\\<wnid>/\\*.JPEG and val/\\<wnid>/\\*.JPEG"),
    ("a\\b  over\n two lines", "a\\\\b over two lines"),
])
def test_flag_table_cell(flag_table, text, expected):
  assert flag_table.cell(text) == expected


def bench_targets() -> dict[str, str]:
  """{make target: the bench program its recipe runs (python -m bench.NAME)} from the Makefile."""
  with open(os.path.join(REPO, "Makefile")) as fh:
    text = fh.read()
  return dict(re.findall(r"^([a-z][\w-]*):[^\n]*\n(?:\t[^\n]*\n)*?\t[^\n]*-m bench\.(\w+)", text, re.M))


def test_every_benchmark_target_runs_a_program_and_docs_benchmarks_names_it():
  targets = bench_targets()
  assert {"bench-input", "bench-comm", "faults", "plan", "slow-links"} <= set(targets)
  with open(os.path.join(REPO, "docs", "benchmarks.md")) as fh:
    page = fh.read()
  with open(README) as fh:
    assert "(docs/benchmarks.md)" in fh.read()
  for target, program in targets.items():
    assert os.path.exists(os.path.join(REPO, "bench", program, "__main__.py")), f"make {target}: no bench/{program}/"
    assert f"| `make {target}` | [`{program}/`](../bench/{program}/) |" in page, \
        f"docs/benchmarks.md has no row for make {target} (bench/{program}/)"

