// Who wrote a file and how: what every program records in its output files
// (docs/formats.md, "Common attributes"). Here rather than in io so that the
// command-line layer can fill it without depending on HDF5.
#pragma once

#include <string>

namespace acc {

struct Provenance {
    std::string producer;      ///< "regime-detect 0.1.0"
    std::string command_line;  ///< the invoking command line, shell-quoted
};

}  // namespace acc
