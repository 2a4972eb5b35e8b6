"""Communication benchmark in the style of nccl-tests: `make bench-comm`.

  python -m bench.allreduce            # the driver: every launch below, then the JSON and the plot
  horovodrun -np 4 python -m bench.allreduce --worker --ranks_per_node=2 --out=F   # one launch

Per launch (ranks, ranks per node, controller MPI or Gloo), rank 0 records
(in this order, so that a launch stopped at its time share keeps the gradients):
  gradients  one full exchange of the ResNet-50 (161 tensors, 25.6 M) and
             AlexNet (16, 61 M) gradient shapes per algorithm: horovod, flat,
             hier, hybrid, flat with fp16 compression, and the mpi4py floor
             (one Allreduce of all gradients in one buffer);
  sweep      one buffer of 4 KB ... 256 MB, per algorithm: horovod (hvd.allreduce),
             hier (comm/hierarchical.py), and the engine's floor: mpi4py's
             Allreduce of the same numpy buffer (MPI launches only);
  overlap    (-np 2 MPI only) how much exchange time train.py's own training
             step (training/step.py) hides.
Times are medians over repeats after a warm-up; algorithms take turns within
each repeat so that load from other processes hits them alike. algbw =
bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' allreduce convention).

  driver.py    the launches in turn, each within its share of the time budget; the JSON and the plot
  worker.py    one rank of a launch: the gradient sets, the sweep, the overlap with a training step
  __main__.py  the command line of both
"""
