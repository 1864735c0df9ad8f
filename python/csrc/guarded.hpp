// The bindings' error convention: custom-class exceptions reach Python as
// RuntimeError carrying only what(); the tag in front tells the package which of
// its exceptions to raise (usage or file problem), and the package strips it.
#pragma once

#include "base/error.hpp"

#include <stdexcept>
#include <string>

namespace acc::python {

template <typename F>
auto guarded(F&& body) -> decltype(body()) {
    try {
        return body();
    } catch (const UsageError& e) {
        throw std::runtime_error(std::string("[accordion:usage] ") + e.what());
    } catch (const FileError& e) {
        throw std::runtime_error(std::string("[accordion:file] ") + e.what());
    } catch (const Error& e) {
        throw std::runtime_error(std::string("[accordion:error] ") + e.what());
    }
}

}  // namespace acc::python
