#!/usr/bin/env bash
# The main job: sets up, builds, and runs Accordion's pipeline on Fashion-MNIST
# with 2 local ranks (examples/pipeline.sh with its defaults): grad-dump
# profiles an MLP, regime-detect finds its critical regimes and writes a
# PowerSGD schedule (rank 2 when critical, rank 1 elsewhere), and train-dist
# replays it next to the two fixed ranks. It ends with a table like Table 1 of
# the Accordion paper; files and plots go to build/example. About 3 minutes
# on 2 cores once built. Options go to examples/pipeline.sh (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
exec bash examples/pipeline.sh --out "${ACC_BUILD_DIR:-build}/example" --plots "$@"
