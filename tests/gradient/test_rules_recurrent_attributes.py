"""Recurrent attribute combinations beyond ``test_rules_recurrent``'s one-per-attribute rows
(the issue-10 checklist): RNN activations taking alpha and beta in both directions, GRU
activations with clip and padded steps, an LSTM with every attribute at once (bidirectional,
peepholes, input_forget, sequence_lens, six activations with alpha/beta), and GRU with
layout 1, linear_before_reset, reverse and clip. Each row runs the usual oracle (float64
finite differences, the full checker, onnxruntime where it has the kernels) and, through
the shared table, forward mode and second order.
"""

from __future__ import annotations

import pytest
from gradcheck import Case, check_gradient
from test_rules_recurrent import _case

RECURRENT_ATTRIBUTE_CASES = [
    _case(
        "RNN_leakyrelu_affine_bidir", "RNN", dirs=2,
        activations=["LeakyRelu", "Affine"], activation_alpha=[0.2, 0.7], activation_beta=[0.3],
    ),
    _case(
        "RNN_thresholdedrelu_scaledtanh_bidir_lens", "RNN", dirs=2, lens=True,
        activations=["ThresholdedRelu", "ScaledTanh"], activation_alpha=[0.1, 0.8], activation_beta=[1.3],
    ),
    _case("GRU_softplus_softsign_clip_lens", "GRU", activations=["Softplus", "Softsign"], clip=1.0, lens=True),
    _case(
        "LSTM_every_attribute", "LSTM", dirs=2, input_forget=1, lens=True, clip=3.0,
        activations=["HardSigmoid", "Tanh", "Tanh", "Sigmoid", "Softsign", "Elu"],
        activation_alpha=[0.25, 1.1], activation_beta=[0.4],
    ),
    _case("GRU_layout1_linear_before_reset_reverse_clip", "GRU", layout=1, linear_before_reset=1,
          direction="reverse", clip=0.9),
]  # fmt: skip


@pytest.mark.parametrize("case", RECURRENT_ATTRIBUTE_CASES, ids=lambda c: c.name)
def test_recurrent_attribute_rule(case: Case) -> None:
    check_gradient(case)
