#include "train/model_table.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

namespace acc::train {

const std::vector<ModelInfo>& model_table() {
    // The language model's vocabulary is WikiText-2's (33,278 words), its sequences --bptt's default.
    static const std::vector<ModelInfo> table = {
        {"mlp", false, true, "fashion-mnist", {{1, 28, 28}, 10, "Fashion-MNIST"}},
        {"cnn", false, false, "fashion-mnist", {{1, 28, 28}, 10, "Fashion-MNIST"}},
        {"resnet18", false, false, "cifar10", {{3, 32, 32}, 10, "CIFAR-10"}},
        {"vgg19_bn", false, false, "cifar10", {{3, 32, 32}, 10, "CIFAR-10"}},
        {"lstm", true, true, "wikitext2", {{35}, 33278, "WikiText-2"}},
    };
    return table;
}

const ModelInfo& model_info(const std::string& name) {
    for (const ModelInfo& m : model_table())
        if (m.name == name) return m;
    throw UsageError("--model: unknown model '" + name + "' (known: " + join(model_names(), ", ") + ")");
}

const std::vector<std::string>& model_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const ModelInfo& m : model_table()) out.push_back(m.name);
        return out;
    }();
    return names;
}

}  // namespace acc::train
