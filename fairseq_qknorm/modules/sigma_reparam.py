"""σReparam: ``W_hat = gamma / sigma(W) * W`` (Zhai et al. 2023, Sec. 3, Eq. 3).

Zhai et al., "Stabilizing Transformer Training by Preventing Attention Entropy Collapse",
ICML 2023.

Implemented as a :mod:`torch.nn.utils.parametrize` parametrization of a linear layer's
``weight``, so every use of ``module.weight`` (every forward path: training, validation,
incremental decoding) sees the reparametrized matrix, and the state dict holds
``parametrizations.weight.original`` (``W``), ``parametrizations.weight.0.gamma`` and
``parametrizations.weight.0.u`` (the power iteration's right singular vector estimate).
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

#: clamp of the norms in the power iteration (a zero matrix stays zero instead of NaN)
SIGMA_REPARAM_EPS = 1e-12


class SigmaReparam(nn.Module):
    """The parametrization ``W -> (gamma / sigma(W)) * W`` of one weight ``W`` ``(out, in)``.

    Zhai et al. (2023), Eq. 3, with ``sigma(W)`` the spectral norm (largest singular value)
    estimated by power iteration as in their code (apple/ml-sigma-reparam,
    ``SpectralNormedWeight``): the buffer ``u`` ``(in,)`` holds the right singular vector
    estimate. Each forward of the layer in training mode first makes one power-iteration step
    without gradient (``v = normalize(W u)``, ``u <- normalize(W^T v)``; a forward pre-hook of
    the layer, :func:`apply_sigma_reparam`, so that reading ``layer.weight`` elsewhere, e.g.
    for its dtype, does not step); every computation of ``W_hat`` then uses
    ``sigma = ||W u||_2`` with the stored ``u`` (= ``v'^T W u`` with ``v' = normalize(W u)``),
    with the gradient flowing through ``W`` only (``u`` is a constant). In eval mode ``u`` is
    not updated, so a validation or decoding forward uses the same ``sigma`` as a training
    forward right after the same update of ``u``. ``gamma`` is a learnable scalar initialised
    to ``sigma(W)`` of the initial ``W`` (exact, from :func:`torch.linalg.svdvals`; ``u`` starts
    at the exact top right singular vector), so that ``W_hat == W`` at initialisation, as in
    the paper (Sec. 3: "we initialize gamma to sigma(W) at init").

    The iteration, ``sigma`` and ``gamma / sigma`` are computed in float32 (float64 for a
    float64 ``W``) with autocast off, also for fp16/bf16 weights; the result is cast back to
    ``W``'s dtype. A stored ``u`` of another dtype (after ``model.half()``) is read in float32
    and written back in its own dtype.

    Args:
        weight: the initial ``W`` ``(out_features, in_features)`` (read, not kept).

    Shape: ``forward(W)``: ``(out, in)`` -> ``(out, in)``, ``W``'s dtype.

    Raises:
        ValueError: ``weight`` is not a 2-D matrix.
    """

    def __init__(self, weight: Tensor):
        super().__init__()
        if weight.dim() != 2:
            raise ValueError(
                f"SigmaReparam needs a 2-D weight (out, in), got shape {tuple(weight.shape)}"
            )
        with torch.no_grad():
            w = weight.detach().to(_compute_dtype(weight.dtype))
            _, s, vh = torch.linalg.svd(w, full_matrices=False)
        self.register_buffer("u", vh[0].to(weight.dtype).clone())
        self.gamma = nn.Parameter(s[0].to(torch.float32).clone())

    @torch.no_grad()
    def power_iteration_step(self, weight: Tensor) -> None:
        """One step ``v = normalize(W u)``, ``u <- normalize(W^T v)`` on the buffer ``u``."""
        with torch.autocast(device_type=weight.device.type, enabled=False):
            self._step(weight.detach().to(_compute_dtype(weight.dtype)))

    def _step(self, w: Tensor) -> None:
        v = F.normalize(torch.mv(w, self.u.to(w.dtype)), dim=0, eps=SIGMA_REPARAM_EPS)
        u = F.normalize(torch.mv(w.t(), v), dim=0, eps=SIGMA_REPARAM_EPS)
        self.u.copy_(u.to(self.u.dtype))

    def sigma(self, weight: Tensor) -> Tensor:
        """``||W u||_2`` with the stored ``u``: the spectral-norm estimate, 0-dim, float32/64.

        Differentiable in ``W`` (``u`` is a constant).
        """
        w = weight.to(_compute_dtype(weight.dtype))
        return torch.linalg.vector_norm(torch.mv(w, self.u.to(w.dtype)))

    def forward(self, weight: Tensor) -> Tensor:
        """``gamma / sigma(W) * W`` with the stored ``u``."""
        with torch.autocast(device_type=weight.device.type, enabled=False):
            w = weight.to(_compute_dtype(weight.dtype))
            factor = self.gamma.to(w.dtype) / self.sigma(weight).clamp_min(SIGMA_REPARAM_EPS)
            out = w * factor
        return out if out.dtype == weight.dtype else out.to(weight.dtype)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _power_iteration_pre_hook(layer: nn.Module, inputs) -> None:
    # one power-iteration step per training forward of a σReparam'd layer (module-agnostic,
    # so that copy.deepcopy of a model, e.g. fairseq's EMA, keeps working)
    if layer.training:
        weights = layer.parametrizations.weight
        for p in weights:
            if isinstance(p, SigmaReparam):
                p.power_iteration_step(weights.original)


def apply_sigma_reparam(module: nn.Module) -> list[str]:
    """Reparametrize the ``weight`` of every ``nn.Linear`` inside ``module`` with σReparam.

    Registers a :class:`SigmaReparam` parametrization (``torch.nn.utils.parametrize``) and the
    forward pre-hook that makes its power-iteration step in training mode on each linear
    layer not parametrized yet. Returns the names of the layers reparametrized (relative to
    ``module``).
    """
    names = []
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear) and not parametrize.is_parametrized(sub, "weight"):
            parametrize.register_parametrization(sub, "weight", SigmaReparam(sub.weight))
            sub.register_forward_pre_hook(_power_iteration_pre_hook)
            names.append(name)
    return names
