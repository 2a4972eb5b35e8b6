"""`python -m bench.plan`: the command line of the planner (bench/plan/__init__.py says what it does)."""
import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the plan builds the model for its gradient shapes

from bench import plan  # noqa: E402
from bench.plan import exchange, predict, report, validate, workload as workloads  # noqa: E402

RESULTS = os.path.join(REPO, "results")


def numbers(text: str, flag: str, parser) -> list[int]:
  """The positive integers of a comma-separated flag value; the parser's error naming the flag otherwise."""
  try:
    values = [int(x) for x in text.split(",") if x]
  except ValueError:
    values = []
  if not values or min(values) < 1:
    parser.error(f"{flag}={text}: pass positive integers separated by commas, e.g. {flag}=16,32,64")
  return values


def measurements(text: str, parser) -> list[tuple[int, float, bool]]:
  """--measured=1024:2.48,4096:>4 as [(1024, 2.48, True), (4096, 4.0, False)]: epochs to the target
  at a global batch, '>' for a run that did not reach it in that many."""
  out = []
  for item in filter(None, text.split(",")):
    batch, _, epochs = item.partition(":")
    try:
      out.append((int(batch), float(epochs.lstrip(">")), not epochs.startswith(">")))
    except ValueError:
      parser.error(f"--measured={text}: pass BATCH:EPOCHS pairs ('>' for not reached), e.g. --measured=1024:2.5,4096:>4")
    if out[-1][0] < 1 or out[-1][1] <= 0:
      parser.error(f"--measured={text}: batches and epochs must be positive")
  return out


def speeds(text: str, parser) -> list[tuple[int, float]]:
  """--speeds=128:321.4,1024:733.5 as [(128, 321.4), (1024, 733.5)]: global images/s at a global batch."""
  out = []
  for item in filter(None, text.split(",")):
    batch, _, rate = item.partition(":")
    try:
      out.append((int(batch), float(rate)))
    except ValueError:
      parser.error(f"--speeds={text}: pass BATCH:IMAGES_PER_SEC pairs, e.g. --speeds=128:321.4,1024:733.5")
    if out[-1][0] < 1 or out[-1][1] <= 0:
      parser.error(f"--speeds={text}: batches and images/s must be positive")
  return out


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python -m bench.plan", description=plan.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--summary", help="a run's summary.json (train.py writes it into --model_dir)")
  source.add_argument("--workload", choices=sorted(workloads.WORKLOADS), help="a workload stated from the papers")
  parser.add_argument("--b_simple", type=float, help="the noise scale B_simple in images (overrides or supplies it)")
  parser.add_argument("--ratio", type=float,
                      help="B_crit / B_simple (default 1; with --measured epochs that reached the target, "
                      "B_crit is fitted to them instead)")
  parser.add_argument("--cluster", choices=sorted(exchange.CLUSTERS), default="p40",
                      help="a stated cluster (default p40: Jia et al.'s)")
  parser.add_argument("--cost_model", help="price the exchange by comm/cost_model.py instead: "
                      "'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER[,FLAT]' (as --hybrid_cost)")
  parser.add_argument("--ranks_per_node", type=int, default=8, help="with --cost_model: ranks a node (default 8)")
  parser.add_argument("--images_per_sec", type=float,
                      help="one rank's images/s on the planned cluster, whatever its batch (default: the workload's)")
  parser.add_argument("--speeds", default="",
                      help="global images/s measured at other global batches, on the run's ranks and per-rank batch "
                      "by accumulation: BATCH:IMAGES_PER_SEC,...; with the run's, a per-update overhead and a "
                      "per-image time are fitted (training/goodput.fit_step_time)")
  parser.add_argument("--per_rank_batches", help="per-rank batches to plan (default: 1, 2 and 4 times the run's)")
  parser.add_argument("--accumulation", default="1,4", help="accumulation steps to plan (default 1,4)")
  parser.add_argument("--max_ranks", type=int, default=2048, help="ranks 1, 2, 4, ... up to this (default 2,048)")
  parser.add_argument("--max_epochs", type=float,
                      help="answer only among global batches that reach the target within this many epochs")
  parser.add_argument("--measured", default="",
                      help="epochs to the target measured at other global batches: BATCH:EPOCHS,... ('>' for not "
                      "reached in that many), e.g. 1024:2.5,4096:>4; B_crit is fitted to those reached, each "
                      "checked against the fit of the others")
  parser.add_argument("--no_overlap", action="store_true", help="the exchange starts after backprop")
  parser.add_argument("--name", help="results/plan_NAME.{md,json,png} (default: workload_cluster)")
  parser.add_argument("--out_dir", default=RESULTS, help="where the plan goes (default: results/)")
  args = parser.parse_args(argv)
  for flag in ("b_simple", "ratio", "images_per_sec", "max_epochs"):
    value = getattr(args, flag)
    if value is not None and value <= 0:
      parser.error(f"--{flag}={value} must be positive")
  args.measured = measurements(args.measured, parser)
  args.speeds = speeds(args.speeds, parser)
  if args.ratio is not None and any(reached for _, _, reached in args.measured):
    parser.error(f"--ratio={args.ratio:g} with --measured epochs that reached the target: the planner fits B_crit "
                 "to those; drop --ratio (or --measured, to plan from B_simple x ratio)")
  if args.images_per_sec and args.speeds:
    parser.error("--images_per_sec with --speeds: pass one speed for every batch or the measured rates to fit, "
                 "not both")
  if args.max_ranks < 1 or args.ranks_per_node < 1:
    parser.error("--max_ranks and --ranks_per_node must be positive")
  return parser, args


def load(parser, args) -> workloads.Workload:
  """The workload of --summary or --workload, with --b_simple applied."""
  if args.workload:
    return workloads.with_b_simple(workloads.WORKLOADS[args.workload], args.b_simple)
  try:
    with open(args.summary) as fh:
      summary = json.load(fh)
    return workloads.from_summary(summary, args.b_simple)
  except (OSError, json.JSONDecodeError) as e:
    parser.error(f"--summary={args.summary}: {e}")
  except KeyError as e:
    parser.error(f"--summary={args.summary}: no {e} key; pass a summary.json that train.py wrote")
  except ValueError as e:
    parser.error(f"--summary={args.summary}: {e}")


def main(argv=None) -> None:
  parser, args = parse_args(argv)
  work = load(parser, args)
  try:
    cluster = (exchange.cost_model_cluster(args.cost_model, args.ranks_per_node) if args.cost_model
               else exchange.CLUSTERS[args.cluster])
  except ValueError:
    parser.error(f"--cost_model={args.cost_model}: pass 'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER', "
                 "e.g. 5,10,10,12.5")
  # Not below the run's per-rank batch by default: its images/s were measured there, and a GPU
  # computes a smaller batch at fewer images/s, which the plan (a time per image) would miss.
  b0 = work.per_rank_batch
  per_rank = (numbers(args.per_rank_batches, "--per_rank_batches", parser) if args.per_rank_batches
              else [b0, 2 * b0, 4 * b0])
  accumulations = numbers(args.accumulation, "--accumulation", parser)
  ranks = [2 ** k for k in range(args.max_ranks.bit_length())
           if 2 ** k <= cluster.ranks_per_node or 2 ** k % cluster.ranks_per_node == 0]
  info = workloads.INFO[work.dataset]
  try:
    sizes = exchange.buckets(exchange.tensor_bytes(work.model, info.num_classes, info.image_shape))
  except KeyError:
    parser.error(f"model {work.model!r} is not one train.py builds (models.MODELS): its gradients are unknown")
  micro = work.ranks * work.per_rank_batch
  odd = [b for b, _ in args.speeds if b % micro]
  if odd:
    parser.error(f"--speeds: global batch {odd[0]:,} is not {work.ranks} ranks x {work.per_rank_batch} x an "
                 "accumulation; pass rates measured on the run's ranks and per-rank batch")
  compute = (predict.Compute(0.0, 1 / args.images_per_sec) if args.images_per_sec
             else predict.fit_compute(work, args.speeds))
  reached = predict.measured_points(work, args.measured)
  fitted = len({b for b, _ in reached}) >= 2 and any(r for _, _, r in args.measured)
  steps = predict.fitted(work, reached) if fitted else predict.from_ratio(work, args.ratio or 1.0)
  check = validate.validate(reached) if fitted else None
  model = predict.Model(steps, compute, work.train_images)
  points = predict.grid(model, cluster, sizes, ranks, per_rank, accumulations, not args.no_overlap)
  if not points:
    parser.error(f"no global batch fits in one epoch of {work.train_images:,} images; lower --per_rank_batches")
  where = "cost-model" if args.cost_model else cluster.name
  name = args.name or re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{work.name}_{where}")
  shown = " ".join(["python -m bench.plan", *(argv if argv is not None else sys.argv[1:])])
  settings = {"name": name, "ratio": None if fitted else args.ratio or 1.0, "fitted": fitted,
              "images_per_sec": args.images_per_sec, "speeds": args.speeds, "overlap": not args.no_overlap,
              "max_epochs": args.max_epochs, "per_rank_batches": per_rank, "accumulation": accumulations,
              "ranks": ranks, "command": shown, "measured": args.measured}
  print(report.write(work, cluster, model, points, settings, args.out_dir, check))


if __name__ == "__main__":
  main()
