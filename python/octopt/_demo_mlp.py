"""The demo's model: a plain NumPy MLP (ReLU hidden layers, softmax cross-entropy), forward and backward."""

from __future__ import annotations

import numpy as np


def init_params(seed: int, sizes: tuple[int, ...]) -> list[np.ndarray]:
    """He-initialized weights (in, out) and zero biases, float32, as [W1, b1, W2, b2, ...]."""
    rng = np.random.default_rng(seed + 1)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append((rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32))
        params.append(np.zeros(fan_out, dtype=np.float32))
    return params


def forward(params: list[np.ndarray], x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits and the layer inputs kept for the backward pass (ReLU between layers)."""
    acts = [x]
    h = x
    n_layers = len(params) // 2
    for i in range(n_layers):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < n_layers - 1:
            h = np.maximum(h, 0.0)
            acts.append(h)
    return h, acts


def softmax_xent(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    n = len(y)
    loss = -float(logp[np.arange(n), y].mean())
    dlogits = np.exp(logp)
    dlogits[np.arange(n), y] -= 1.0
    return loss, (dlogits / n).astype(np.float32)


def loss_and_grads(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    logits, acts = forward(params, x)
    loss, delta = softmax_xent(logits, y)
    grads: list[np.ndarray] = [None] * len(params)  # type: ignore[list-item]
    for i in reversed(range(len(params) // 2)):
        grads[2 * i] = acts[i].T @ delta
        grads[2 * i + 1] = delta.sum(axis=0)
        if i > 0:
            # acts[i] is a ReLU output: its derivative is 1 exactly where the output is positive
            delta = (delta @ params[2 * i].T) * (acts[i] > 0)
    return loss, [np.ascontiguousarray(g, dtype=np.float32) for g in grads]


def evaluate(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    logits, _ = forward(params, x)
    loss, _ = softmax_xent(logits, y)
    return loss, float((logits.argmax(axis=1) == y).mean())
