"""The import graph of the project's modules, read with ast: no arrow runs up the floor
plan of flags/__init__.py, none closes a loop, and no project import hides inside a function."""
import ast
import os

import pytest

from conftest import REPO

# flags/__init__.py's floor plan. A module may import modules on a lower floor, or of its
# own package on its own floor. Keys: a module, or "package.*" for the package and everything
# in it; the most specific key wins.
FLOORS = {
    "flags": 0, "flags.config": 0, "progress": 0,
    "models.*": 1, "optimizers.*": 1,
    "comm.*": 2,
    "input.*": 3,
    "training.*": 4,
    "flags.*": 5,
    "train": 6, "bench.*": 6,
}
PACKAGES = ("flags", "comm", "input", "models", "optimizers", "training", "bench")
MODULES = ("train", "progress")
# bench/ is only checked for what it may import (anything below it), not for imports inside
# functions: its workers import Horovod and the project once horovodrun has started them.
LAZY_ALLOWED = ("bench",)
# bench/: a folder per program (`python -m bench.NAME`, its make target) and bench.harness, what the
# programs share. A program imports the harness, its own modules, and of another program only the
# library modules named here, each with what it takes; the harness imports no program.
BENCH_LIBRARIES = {
    "bench.noise_scale.study": "make adaptive keeps make noise-scale's model, batch, LR policy and target",
    "bench.time_to_accuracy.recipe": "make bench-compression's accuracy part trains make time-to-accuracy's (c)",
    "bench.scaling.settings": "bench-compression's speed part repeats bench-scaling's launches: heap, batch, models",
    "bench.scaling.timing": "... and times its ranks as bench-scaling's workers do",
    "bench.scaling.simulate": "the stated P40 cluster and its allreduces, which the planner's pricing reads",
    "bench.plan.exchange": "the planner's price of one exchange, make time-to-accuracy's at-scale section's too",
}
# Modules left in bench/ itself, and why: none is a program.
BENCH_LOOSE = {
    "__init__.py": "the package",
}
BENCH_MAX_LINES = 300  # issue 43: a module of a bench folder past it holds two things


def floor(module: str) -> int:
  """The floor of a module in FLOORS; KeyError for a module the plan does not place."""
  if module in FLOORS:
    return FLOORS[module]
  parts = module.split(".")
  for n in range(len(parts), 0, -1):
    key = ".".join(parts[:n]) + ".*"
    if key in FLOORS:
      return FLOORS[key]
  raise KeyError(module)


def _package(module: str) -> str:
  return module.split(".")[0]


def upward(importer: str, imported: str) -> str | None:
  """Why importer may not import imported (one sentence naming both), or None."""
  a, b = floor(importer), floor(imported)
  if b < a or (b == a and _package(importer) == _package(imported)):
    return None
  where = "above" if b > a else "beside"
  return (f"{importer} (floor {a}) imports {imported} (floor {b}), {where} it in flags/__init__.py's "
          f"floor plan; import the type from a lower floor (settings: flags.config) or move the code down.")


def project_modules() -> dict[str, str]:
  """{module name: path} of every module of the project's packages and top-level modules."""
  found = {m: os.path.join(REPO, f"{m}.py") for m in MODULES}
  for package in PACKAGES:
    for root, dirs, files in os.walk(os.path.join(REPO, package)):
      dirs[:] = [d for d in dirs if os.path.exists(os.path.join(root, d, "__init__.py"))]
      for name in files:
        if name.endswith(".py"):
          parts = os.path.relpath(os.path.join(root, name), REPO)[:-3].split(os.sep)
          found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(root, name)
  return found


def imports_of(module: str, path: str, known) -> list[tuple[str, int, bool]]:
  """[(imported project module, line, inside a function or class)] of one file.

  `import a.b` and `from a.b import c` also run a and a.b (each package's
  __init__), so those count as imported too; c counts when it is a module.
  """
  with open(path) as fh:
    tree = ast.parse(fh.read(), path)
  is_package = path.endswith("__init__.py")
  found = []

  def add(name, line, nested):
    parts = name.split(".")
    for n in range(1, len(parts) + 1):
      target = ".".join(parts[:n])
      if target in known and target != module:
        found.append((target, line, nested))

  def visit(node, nested):
    for child in ast.iter_child_nodes(node):
      inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
      if isinstance(child, ast.Import):
        for alias in child.names:
          add(alias.name, child.lineno, inner)
      elif isinstance(child, ast.ImportFrom):
        base = child.module or ""
        if child.level:  # relative: from the package of this module
          package = module.split(".") if is_package else module.split(".")[:-1]
          package = package[:len(package) - child.level + 1]
          base = ".".join(package + ([base] if base else []))
        add(base, child.lineno, inner)
        for alias in child.names:
          if f"{base}.{alias.name}" in known:
            found.append((f"{base}.{alias.name}", child.lineno, inner))
      visit(child, inner)
  visit(tree, False)
  return found


def graph() -> dict[str, list[tuple[str, int, bool]]]:
  known = project_modules()
  return {m: imports_of(m, path, known) for m, path in sorted(known.items())}


def _one_per_line(found):
  """The deepest module of each import statement (flags.errors, not also flags)."""
  deepest = {}
  for m, target, line in found:
    if len(target) > len(deepest.get((m, line), "")):
      deepest[(m, line)] = target
  return [(m, target, line) for (m, line), target in sorted(deepest.items())]


def _rel(module: str) -> str:
  return os.path.relpath(project_modules()[module], REPO)


@pytest.mark.parametrize("importer, imported, allowed", [
    ("comm.topology", "flags.config", True),
    ("comm.topology", "flags", True),          # the package: its __init__ imports nothing
    ("input.pipeline", "comm.topology", True),
    ("comm.exchange", "comm.fusion", True),    # own package, own floor
    ("flags.data", "input.sources", True),
    ("bench.allreduce.worker", "comm.exchange", True),
    ("comm.exchange", "flags.comm", False),    # the arrows issue 13 names
    ("input.pipeline", "flags.data", False),
    ("comm.topology", "input.sources", False),
    ("flags", "flags.data", False),            # flags/__init__ would run the checks on import
    ("flags.config", "comm.topology", False),
    ("models.resnet", "optimizers.lars", False),  # beside: packages on one floor stay apart
    ("train", "bench.allreduce.worker", False),
])
def test_the_floor_plan_table(importer, imported, allowed):
  problem = upward(importer, imported)
  assert (problem is None) == allowed
  if problem:
    assert importer in problem and imported in problem


def test_every_module_has_a_floor():
  unplaced = []
  for module in project_modules():
    try:
      floor(module)
    except KeyError:
      unplaced.append(module)
  assert not unplaced, f"add {unplaced} to FLOORS here and to flags/__init__.py's floor plan"


def test_no_arrow_runs_up_the_floor_plan():
  found = [(m, target, line) for m, edges in graph().items() for target, line, _ in edges if upward(m, target)]
  problems = [f"{_rel(m)}:{line}: {upward(m, target)}" for m, target, line in _one_per_line(found)]
  assert not problems, "\n".join(problems)


def test_no_project_import_inside_a_function():
  found = [(m, target, line) for m, edges in graph().items() if _package(m) not in LAZY_ALLOWED
           for target, line, nested in edges if nested]
  problems = [f"{_rel(m)}:{line} imports {target} inside a function; import it at the top of the module "
              "(the floor plan has no loop to dodge)" for m, target, line in _one_per_line(found)]
  assert not problems, "\n".join(problems)


def test_no_import_loop():
  # A module's own packages run before it, so arrows to them close no loop.
  edges = {m: {t for t, _, _ in ts if not m.startswith(t + ".")} for m, ts in graph().items()}
  state, loops = {}, []

  def walk(m, path):
    state[m] = "open"
    for t in sorted(edges[m]):
      if state.get(t) == "open":
        loops.append(" -> ".join(path[path.index(t):] + [t]))
      elif t not in state:
        walk(t, path + [t])
    state[m] = "done"
  for m in edges:
    if m not in state:
      walk(m, [m])
  assert not loops, "import loops: " + "; ".join(loops)


def test_imports_of_reads_packages_relative_imports_and_nesting(tmp_path):
  path = tmp_path / "exchange.py"
  path.write_text("import os\nfrom comm import fusion\nfrom . import topology\n\n"
                  "def f():\n  from input import sources\n")
  known = {"comm", "comm.fusion", "comm.topology", "input", "input.sources"}
  assert imports_of("comm.exchange", str(path), known) == [
      ("comm", 2, False), ("comm.fusion", 2, False), ("comm", 3, False), ("comm.topology", 3, False),
      ("input", 6, True), ("input.sources", 6, True)]


def test_no_module_is_over_400_lines():
  # STYLE.md's small modules, and issue 38's bound: a module past it holds two things.
  long = {_rel(m): n for m, path in project_modules().items()
          if (n := sum(1 for _ in open(path, encoding="utf-8"))) > 400}
  assert not long, f"modules over 400 lines (split them by what they hold): {long}"


def _functions(path: str):
  with open(path, encoding="utf-8") as fh:
    tree = ast.parse(fh.read(), path)
  return tree, [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_function_is_over_90_lines():
  # Issue 43: a function past it (make_train_step was 122) holds two steps; split it where they part.
  long = {f"{_rel(m)}:{f.name}": f.end_lineno - f.lineno + 1 for m, path in project_modules().items()
          for f in _functions(path)[1] if f.end_lineno - f.lineno + 1 > 90}
  assert not long, f"functions over 90 lines: {long}"


def test_train_py_reads_as_banner_sections():
  # Issue 43 (big_vision's train.py): sections top to bottom, wiring with keyword arguments, no lambda
  # that wires a component and no nested function (STYLE.md, principle 13): a run's shape never
  # changes in a closure of train.py.
  path = os.path.join(REPO, "train.py")
  tree, functions = _functions(path)
  with open(path, encoding="utf-8") as fh:
    assert sum(1 for _ in fh) <= 200, "train.py over 200 lines: move a component's building into its package"
  train = next(f for f in functions if f.name == "train")
  assert train.end_lineno - train.lineno + 1 <= 50, "train() over 50 lines"
  lambdas = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
  assert not lambdas, f"train.py: lambdas at lines {lambdas}; a named object (training/assembly.py) instead"
  nested = [g.name for f in functions for g in ast.walk(f) if g is not f and isinstance(g, ast.FunctionDef)]
  assert not nested, f"train.py: nested functions {nested}"


def _program(module: str) -> str:
  """bench.NAME's NAME (harness, or a program) of a module under bench/."""
  return module.split(".")[1] if module.count(".") else ""


def bench_problems(edges: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
  """Why each import between bench's folders breaks BENCH_LIBRARIES' rule (one sentence each)."""
  found = [(m, t, line) for m, ts in edges.items() if m.startswith("bench.")
           for t, line, _ in ts if t.startswith("bench.") and _program(t) not in (_program(m), "")]
  problems = []
  for m, t, line in _one_per_line(found):
    if _program(m) == "harness":
      problems.append(f"{m}:{line} imports {t}: the harness imports no program; move what both need into it")
    elif _program(t) != "harness" and t not in BENCH_LIBRARIES:
      problems.append(f"{m}:{line} imports {t}, another program's module: move what both need into bench/harness/, "
                      "or name the module in BENCH_LIBRARIES with what it takes")
  return problems


@pytest.mark.parametrize("edges, broken", [
    ({"bench.faults.run": [("bench.harness.launches", 3, False), ("bench.faults.verdicts", 4, False)]}, []),
    ({"bench.compression.accuracy": [("bench.time_to_accuracy.recipe", 5, False)]}, []),
    ({"bench.compression.accuracy": [("bench.time_to_accuracy.__main__", 5, False)]}, ["time_to_accuracy.__main__"]),
    ({"bench.harness.train_runs": [("bench.plan.exchange", 7, True)]}, ["the harness imports no program"]),
])
def test_bench_problems(edges, broken):
  problems = bench_problems(edges)
  assert len(problems) == len(broken) and all(b in p for b, p in zip(broken, problems))


def test_bench_programs_reach_each_other_only_through_named_libraries():
  problems = bench_problems(graph())
  assert not problems, "\n".join(problems)
  known = project_modules()
  assert not [m for m in BENCH_LIBRARIES if m not in known], "BENCH_LIBRARIES names a module that is gone"


def test_bench_is_a_folder_per_program():
  bench = os.path.join(REPO, "bench")
  loose = sorted(set(n for n in os.listdir(bench) if n.endswith(".py")) - set(BENCH_LOOSE))
  assert not loose, f"bench/{loose}: a program is a folder with its __main__.py, a shared helper bench/harness/'s"
  folders = [d for d in os.listdir(bench) if os.path.exists(os.path.join(bench, d, "__init__.py"))]
  without = [d for d in folders if d != "harness" and not os.path.exists(os.path.join(bench, d, "__main__.py"))]
  assert not without, f"bench/{without}: each program folder runs as python -m bench.NAME (its __main__.py)"


def test_no_bench_module_is_over_300_lines():
  long = {_rel(m): n for m, path in project_modules().items() if m.startswith("bench.")
          if (n := sum(1 for _ in open(path, encoding="utf-8"))) > BENCH_MAX_LINES}
  assert not long, f"bench modules over {BENCH_MAX_LINES} lines (split them by what they hold): {long}"
