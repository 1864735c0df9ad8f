#include "train/profile.hpp"

#include "compress/spec.hpp"
#include "regime/plan.hpp"

#include <cmath>

namespace acc::train {

plan::LayerProfile layer_profile(const torch::Tensor& sum, const io::Parameter& parameter) {
    const torch::Tensor values = sum.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    plan::LayerProfile profile;
    profile.tail = regime::topk_tail_fractions(values.data_ptr<float>(), values.numel());
    const torch::Tensor wide = values.to(torch::kFloat64);
    profile.norm = std::sqrt(wide.pow(2).sum().item<double>());
    if (parameter.is_matrix()) {
        const compress::MatrixView view = compress::matrix_view(parameter.shape);
        const torch::Tensor s = torch::linalg_svdvals(wide.reshape({view.rows, view.cols})).contiguous();
        profile.spectrum.assign(s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
    }
    return profile;
}

}  // namespace acc::train
