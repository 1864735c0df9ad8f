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
build=${ACC_BUILD_DIR:-build}
echo "quickstart: checking the Debian packages (scripts/setup.sh)" >&2
scripts/setup.sh
# The build's progress and any compiler error go to the terminal. Only the three
# programs the pipeline runs are built (the tests and the rest come with
# scripts/test.sh or scripts/build.sh): a first build takes about 8 minutes on 2
# cores with an empty compiler cache, a rebuild seconds.
echo "quickstart: building grad-dump, regime-detect and train-dist (scripts/build.sh)" >&2
ACC_BUILD_TARGETS="grad-dump regime-detect train-dist" scripts/build.sh
echo "quickstart: running the pipeline (examples/pipeline.sh)" >&2
bash examples/pipeline.sh --out "$build/example" --plots "$@"
bin=$(cd "$build/bin" && pwd)
cat >&2 <<TEXT

The programs are in $bin. To run them by name, as the README does:
    export PATH="$bin:\$PATH"
or install them (with their manual pages) under a prefix:
    cmake --install $build --prefix \$HOME/.local    # then \$HOME/.local/bin on PATH
TEXT
