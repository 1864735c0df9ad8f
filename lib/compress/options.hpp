// The compressors' own options, each declared in its compressor's file
// (compressors/<name>_options.hpp), together: what an exchange hands its
// compressors without knowing any of them. No LibTorch here.
#pragma once

#include "compress/compressors/dgc_options.hpp"
#include "compress/compressors/powersgd_options.hpp"
#include "compress/compressors/topk_options.hpp"

namespace acc::compress {

struct CompressorOptions {
    PowerSgdOptions powersgd;
    TopkOptions topk;
    DgcOptions dgc;
};

}  // namespace acc::compress
