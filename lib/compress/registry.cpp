// The one list of compressors. Each compressor's file defines a function returning its
// CompressorInfo, and this list calls them by name. Not self-registering globals: the
// compressors live in a static library, and a linker drops an object file that nothing
// references, so a compressor registered by a static initialiser in its own file would
// silently be missing from some programs.
#include "compress/compressors/common.hpp"

namespace acc::compress {

const std::vector<CompressorInfo>& compressors() {
    // The order --help lists them in.
    static const std::vector<CompressorInfo> list = {
        none_compressor(),    fp16_compressor(),      powersgd_compressor(), topk_compressor(),
        randomk_compressor(), dgc_compressor(),       signsgd_compressor(),  efsignsgd_compressor(),
        qsgd_compressor(),    terngrad_compressor(),
    };
    return list;
}

const std::vector<std::string>& gravac_families() {
    // The order --gravac's messages list them in; each one's file says how GraVAC scales it.
    static const std::vector<std::string> list = [] {
        std::vector<std::string> names;
        for (const CompressorInfo* c : {&topk_compressor(), &dgc_compressor(), &randomk_compressor(),
                                        &powersgd_compressor()})
            names.push_back(c->name);
        return names;
    }();
    return list;
}

}  // namespace acc::compress
