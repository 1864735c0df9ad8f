# Shared by the train-dist --gravac tests (sourced after common.sh).

# same_gravac_decisions LOG EPOCHS: both ranks of a 2-rank run logged (with -v) one
# digest of their GraVAC decisions per epoch, and the two agree in every epoch.
same_gravac_decisions() {
    local log=$1 epochs=$2 lines e n
    lines=$(sed -nE 's/^train-dist\[[01]\]: debug: rank ([01]): gravac epoch ([0-9]+): steps at each factor (.*); decisions digest ([0-9a-f]{16})$/\2 \1 \3 \4/p' "$log" | sort)
    [ "$(echo "$lines" | wc -l)" = $((2 * epochs)) ] || fail "expected $epochs epochs x 2 ranks of GraVAC digests: $lines"
    for ((e = 0; e < epochs; e++)); do
        n=$(echo "$lines" | awk -v e="$e" '$1 == e {$2 = ""; print}' | sort -u | wc -l)
        [ "$n" = 1 ] || fail "ranks took different GraVAC decisions in epoch $e: $(echo "$lines" | grep "^$e ")"
    done
}

# gravac_resume FAMILY: two epochs, then --resume to four, against four in one go
# (in full/ and part/ of the current directory). The window is longer than the run,
# so no decision depends on measured times: the checkpoints (the controller's
# inputs aside) and the metrics (times aside) must agree. Each test then checks
# its family's own state in the checkpoints.
gravac_resume() {
    local check="$ACC_PYTHON $ACC_SOURCE/tests/e2e/train_dist_check.py"
    local resume=(--model mlp --hidden-size 32 --train-samples 480 --test-samples 100 --threads 1 --batch-size 24
        --momentum 0.9 --lr 0.05 --seed 5 --nproc 2 -q --gravac "$1" --gravac-theta-min 4 --gravac-window 1000
        --gravac-epsilon 0.5)
    mkdir full part
    train-dist "${resume[@]}" --epochs 4 --metrics full/m.h5 2>full.log || fail "resume: full run: $(tail -3 full.log)"
    train-dist "${resume[@]}" --epochs 2 --metrics part/m.h5 2>part.log || fail "resume: first part: $(tail -3 part.log)"
    train-dist "${resume[@]}" --epochs 4 --metrics part/m.h5 --resume 2>part2.log || fail "resume: $(tail -3 part2.log)"
    $check same-run full/m.ckpt.h5 part/m.ckpt.h5 --skip inputs || fail "resume: checkpoints differ"
    $check same-run full/m.h5 part/m.h5 \
        --skip seconds,compute_seconds,compression_seconds,encode_seconds,decode_seconds,communication_seconds,rank_communication_seconds,throughput ||
        fail "resume: metrics differ"
}
