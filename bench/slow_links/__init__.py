"""`make slow-links` (issue 38, item 5): stock Horovod against this project's exchange, adaptive
batch and compression, where links are slow, by the time to a held-out accuracy.

ResNet-8 on Fashion-MNIST on 2 and 4 emulated hosts of one rank each (bench/harness/hosts.Hosts:
network namespaces joined by tc rate-limited links, on this machine's cores), at a rate where the
exchange dominates a step (20 Mbit/s: ResNet-8's 0.3 MB of gradients take ~0.12 s a step between
2 hosts, a micro-batch of 32 ~0.04 s) and with the links unshaped. Arms (bench/slow_links/arms.py):

  stock     --allreduce=horovod, the linear rule + gradual warmup, no compression, at 32, 128 and
            512 images a rank an update; the best (lowest median time to target) is the anchor
  auto      ours (--allreduce=flat) at stock's best batch with --compression=auto
  adaptive  --lr_scaling=adascale --batch_policy=adaptive, K only (--compression=none)
  joint     the same with --compression=auto: the controller chooses K and the exchange together
  lost      the joint arm under --elastic, a host lost a third of the way into the joint arm's
            own time to target and back at two thirds
  budget    stock's best against the joint arm on one budget of base-batch epochs (slow rate,
            2 hosts): final top-1 at equal epochs, since the other runs stop at the target

Each row: time to target (train.py's time_to_target_seconds, MLPerf's clock from start-up),
updates to target, images trained, final top-1, the K and compression trace, and the bytes the
kernel counted on each host's link. results/slow_links.json's `summary` gives per link rate and
host count `ratio_to_stock`, the joint arm's median time to target over stock's best fixed batch's,
and `verdicts` the targets met or not (bench/slow_links/summary.py).

  python -m bench.slow_links                     # the full study (root): hours, see the report
  python -m bench.slow_links --quick             # smoke run: every arm once, 20 Mbit/s, 2 hosts
  python -m bench.slow_links --only=stock,joint --rates=20mbit --hosts=2 --reuse
  python -m bench.slow_links.report              # the report again from results/slow_links.json
"""
