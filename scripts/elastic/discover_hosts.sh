#!/bin/sh
# Host discovery for elastic training (horovodrun --host-discovery-script): Horovod runs this
# every few seconds and takes the hosts it prints, one "host:slots" per line, as the hosts the
# job may use now. This one prints the lines of a file (blank lines and # comments left out),
# so that adding a line adds a host and deleting one takes it away:
#
#   ELASTIC_HOSTS=hosts.txt horovodrun --gloo -np 4 --min-np 2 --blacklist-cooldown-range 10 20 \
#       --host-discovery-script scripts/elastic/discover_hosts.sh python train.py --elastic
#
# (--blacklist-cooldown-range: without it Horovod blacklists a host whose rank failed for the rest
# of the job, and a host listed here again never rejoins.)
#
# ELASTIC_HOSTS: the file (default: hosts.txt in the current directory). On a real cluster the
# script is the scheduler's view instead; docs/faults.md has one for Slurm.
set -eu
hosts=${ELASTIC_HOSTS:-hosts.txt}
[ -r "$hosts" ] || { echo "discover_hosts: $hosts is not readable; set ELASTIC_HOSTS to the hosts file" >&2; exit 2; }
grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$hosts" || true
