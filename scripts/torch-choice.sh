# Sourced by build.sh, test.sh and test-python.sh: which torch they build or test
# against, from "--torch debian|pip" at the front of their arguments.
#   acc_torch_choice PROGRAM "$@"; shift "$acc_torch_shift"
# sets $torch (debian unless told) and $build, the build folder: $ACC_BUILD_DIR,
# else build/ for Debian's LibTorch and build-pip/ for pip's torch. Any other
# value is a usage error (exit 2) in PROGRAM's name.
acc_torch_choice() {
    local program=$1
    shift
    torch=debian
    acc_torch_shift=0
    if [ "${1:-}" = "--torch" ]; then
        torch=${2:-}
        acc_torch_shift=$(($# >= 2 ? 2 : 1))
    fi
    case $torch in
    debian) build=${ACC_BUILD_DIR:-build} ;;
    pip) build=${ACC_BUILD_DIR:-build-pip} ;;
    *)
        echo "$program: error: --torch: '$torch' is not one of debian, pip" >&2
        exit 2
        ;;
    esac
}
