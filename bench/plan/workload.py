"""What the planner plans: a run's summary.json read into a Workload, or a workload stated from the papers."""
import dataclasses

from input.datasets import DATASETS, IMAGENET

# Every data set train.py knows, by summary.json's "dataset" name: split sizes, classes, image shape.
INFO = {**DATASETS, IMAGENET.name: IMAGENET}


@dataclasses.dataclass(frozen=True)
class Workload:
  """One model to one target: `epochs` to reach it at global batch `batch` (a lower bound when not
  `reached`), on `ranks` ranks of per_rank_batch a micro-batch x `accumulation`, each rank at
  images_per_sec, the gradient noise scale b_simple (examples), and notes: where each figure comes
  from and what it leaves out (printed with the plan)."""
  name: str
  model: str
  dataset: str
  target: str
  train_images: int
  epochs: float
  batch: int
  per_rank_batch: int
  images_per_sec: float
  b_simple: float
  ranks: int = 1
  accumulation: int = 1
  reached: bool = True
  notes: tuple[str, ...] = ()
  # (ranks, per-rank batch, accumulation, seconds, what they are): a measured time to the target
  # to hold the plan against
  reference: tuple | None = None


def noise_scale_of(summary: dict) -> tuple[float | None, str]:
  """(B_simple, where from) of summary.json's noise_scale: at the target if measured there (the
  noise scale grows as training goes on, and the steps that matter are those to the target), else
  at the end of the run."""
  noise = summary.get("noise_scale") or {}
  at = noise.get("at_target") or {}
  if at.get("b_simple"):
    return at["b_simple"], f"measured at the target (step {at.get('step')})"
  if noise.get("b_simple"):
    return noise["b_simple"], f"measured over the run's end ({noise.get('steps')} steps measured)"
  return None, ""


def from_summary(summary: dict, b_simple: float | None = None) -> Workload:
  """A Workload from train.py's summary.json (a dict); b_simple overrides or supplies the noise scale.

  Reads model, dataset, target_top1, target_reached, target_epoch (or epochs when the target was
  not reached: then epochs to target are at least that, and the plan is optimistic), global_batch,
  per_rank_batch, accumulation_steps, ranks, images_per_sec (global, training steps) and
  noise_scale. ValueError (one sentence) when no noise scale is known or the data set is not one
  train.py names (its size is needed).
  """
  if summary["dataset"] not in INFO:
    raise ValueError(f"the summary's dataset {summary['dataset']!r} is none of {', '.join(sorted(INFO))}: "
                     "its number of training images is unknown")
  measured, source = noise_scale_of(summary)
  if b_simple is None and measured is None:
    raise ValueError("the summary has no noise_scale.b_simple (measured by a run with 2+ ranks or accumulation); "
                     "pass --b_simple=N to supply it")
  notes = [f"B_simple {b_simple:,.0f} from --b_simple" + (f" (the summary's: {measured:,.0f})" if measured else "")
           if b_simple is not None else f"B_simple {measured:,.0f} {source}"]
  reached = bool(summary.get("target_reached"))
  epochs = summary["target_epoch"] if reached else summary["epochs"]
  if not reached:
    notes.append(f"the run did not reach its target: its {epochs:g} epochs are a lower bound on the epochs to "
                 "target, so every time below is a lower bound")
  ranks = summary["ranks"]
  notes.append(f"{summary['images_per_sec'] / ranks:,.1f} images/s per rank: the run's {summary['images_per_sec']:,} "
               f"images/s over {ranks} ranks at {summary['per_rank_batch']} per rank (its own exchange inside)")
  dataset = summary["dataset"]
  # The run's own time in training steps (its clock's time to target also holds start-up and evaluations).
  trained = (ranks, summary["per_rank_batch"], summary.get("accumulation_steps", 1),
             epochs * INFO[dataset].num_train / summary["images_per_sec"], "the run's")
  return Workload(name=f"{summary['model']}-{dataset}", model=summary["model"], dataset=dataset,
                  target=f"held-out top-1 {summary.get('target_top1')}", train_images=INFO[dataset].num_train,
                  epochs=epochs, batch=summary["global_batch"], per_rank_batch=summary["per_rank_batch"],
                  images_per_sec=summary["images_per_sec"] / ranks,
                  b_simple=b_simple if b_simple is not None else measured, ranks=ranks,
                  accumulation=summary.get("accumulation_steps", 1), reached=reached, notes=tuple(notes),
                  reference=trained)


# ResNet-50 on ImageNet to ~76% top-1 on Jia et al.'s cluster: no run here, every figure stated.
JIA_SECONDS = 6.6 * 60   # Jia et al. 2018: 75.8% top-1 in 6.6 minutes on 2,048 P40, batch 65,536, 90 epochs
JIA_RANKS, JIA_BATCH, JIA_EPOCHS = 2048, 65_536, 90
RESNET50_IMAGENET = Workload(
    name="resnet50-imagenet", model="resnet50", dataset="imagenet", target="top-1 ~76% (MLPerf: 75.9%)",
    train_images=IMAGENET.num_train, epochs=JIA_EPOCHS, batch=JIA_BATCH, per_rank_batch=JIA_BATCH // JIA_RANKS,
    # Their end-to-end speed per GPU: 90 epochs x 1,281,167 images / 396 s / 2,048 GPUs. Their
    # exchange is inside it, and the plan adds the modelled one on top: a little pessimistic.
    images_per_sec=JIA_EPOCHS * IMAGENET.num_train / JIA_SECONDS / JIA_RANKS,
    # McCandlish et al. 2018 (abstract): ImageNet's largest useful batch is in the "tens of
    # thousands"; 32,768 is that order, the batch from which MLPerf's LARS reference changes its
    # recipe (REFERENCE.md), and half of Jia et al.'s. Stated, not measured: --b_simple changes it.
    b_simple=32_768, ranks=JIA_RANKS,
    notes=("epochs to target: 90 at batch 65,536 (Jia et al. 2018, LARS, 75.8%; Goyal et al. 2017 also train 90 "
           "epochs, at 8,192, to 76.3% with SGD): fixed schedules, not measured times to a target, so E_min is "
           "an upper bound",
           "B_simple 32,768 stated: McCandlish et al. 2018 put ImageNet's largest useful batch in the tens of "
           "thousands; pass --b_simple to use another",
           f"{JIA_EPOCHS * IMAGENET.num_train / JIA_SECONDS / JIA_RANKS:.0f} images/s per P40: Jia et al.'s end-to-end "
           "speed (90 epochs x 1,281,167 images in 6.6 min on 2,048 GPUs), their exchange inside it"),
    reference=(JIA_RANKS, JIA_BATCH // JIA_RANKS, 1, JIA_SECONDS, "Jia et al.'s"))
WORKLOADS = {RESNET50_IMAGENET.name: RESNET50_IMAGENET}


def with_b_simple(workload: Workload, b_simple: float | None) -> Workload:
  """The workload with --b_simple in place of its stated noise scale (itself when None)."""
  if b_simple is None:
    return workload
  notes = tuple(n for n in workload.notes if not n.startswith("B_simple"))
  return dataclasses.replace(workload, b_simple=b_simple, notes=(f"B_simple {b_simple:,.0f} from --b_simple",) + notes)
