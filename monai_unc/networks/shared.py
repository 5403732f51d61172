"""Compute once what the samples share, batch what they don't: Monte-Carlo samples at nearly the cost of one pass.

When the stochastic operations of a network (MC dropout, post-hoc dropout hooks, Rate-In, DropPath) sit in only part
of it, every activation that does not depend on a random draw is the same for all samples of one input. A
:class:`SharedPasses` object finds those activations and computes them once:

1. **Trace** (the first sample, an ordinary forward pass): every ``forward`` of every submodule is wrapped, and a
   ``TorchFunctionMode`` follows which tensors depend on a random draw ("stochastic" tensors): the output of a random
   operation (``dropout*`` with ``training=True`` and ``p > 0``, ``rand*``, ``bernoulli``, ``normal_``, ...) is
   stochastic, and so is the output of any operation with a stochastic input (in-place operations included). A
   module call whose inputs and ``forward`` output are not stochastic, and that does not write into its inputs (a
   ``ReLU(inplace=True)`` on its input: a replay that skipped it would leave the input unwritten for its later
   readers), is *shared*: its output is kept (only the outermost shared calls are kept, their inner calls are
   released). A post-hoc dropout hook runs after ``forward`` (in ``Module.__call__``), so the hooked stage itself
   is shared and only its dropout is redrawn. The data flow is that of the real call, not a static graph, so skip
   connections (a decoder consuming cached encoder features), Python control flow and shape-dependent code need
   nothing special.
2. **Replay** (the other samples, ``k`` at a time): the network runs on the input repeated ``k`` times along the
   batch axis; each shared call returns its kept output repeated ``k`` times instead of computing it, everything
   else (the stochastic remainder) runs batched, and every random operation draws independent values for each of
   the ``k`` copies (the masks are per batch element). Unless the traced pass wrote a stochastic value into a
   non-stochastic tensor, shared values are handed on as views of their batch-1 values expanded to ``k`` (no copy),
   and an operation outside module calls whose tensor arguments are all shared values or the network's parameters
   (a decoder's ``torch.cat`` of an upsampled map and its encoder skip) runs once on the batch-1 values when its
   result keeps the batch axis (checked on the ``meta`` device); see :class:`_Share`. A batch of ``B > 1`` inputs
   (sliding windows with ``sw_batch_size >= 2``) is traced as one batch (one pass of ``B`` inputs costs less than
   ``B`` passes of one) and replayed one input at a time, its batch-1 values being rows of the kept outputs (an
   expanded ``(k, B, ...)`` view cannot be a ``(k B, ...)`` tensor without a copy); the ``B`` outputs are
   interleaved as a replay of the whole batch gives them. A one-sample replay (``k = 1``) of such a batch runs the
   whole batch with the kept values copied instead: one input and one sample would run the stochastic rest at batch
   1, where PyTorch's CPU convolution takes a much slower kernel for small inputs.
   A replay object can replay any number of batches from one trace (the kept outputs are never written).
3. **Plain replays** when sharing saves little: the trace also weighs each operation's arithmetic (multiply-adds of
   convolutions and linear maps, the returned elements of anything else); when the kept calls hold less than
   :data:`MIN_SHARED_WORK` of it (a U-Net with dropout after every stage keeps only its first block, a few percent),
   the replays run the network on the input repeated ``k`` times with every call computed and only the draws counted.
   Following every operation of a replay costs Python time per operation, more than such a split saves where
   operations are fast (a small network on a GPU: 1.85 times the full passes at 96^3 on an H200).

Exactness: a shared call computes a deterministic function of its (non-stochastic) inputs, so replacing it by its traced
value changes nothing. The replay refuses (:class:`SharingUnavailable`) when the input differs from the traced one (e.g.
a test-time augmentation that draws noise on every call), when the module calls do not follow the traced order, or when
a kept output was changed in place after it was kept; the inferers then fall back to full passes and say why in one log
line (plain replays compute every call: they refuse only another input). A replay of ``k`` samples runs them one at a
time (each replay still skips the kept calls, unless plain) when the traced pass turned a random draw into a Python
value (``if d.mean() > 0``: a batch of samples would take one branch; the module calls under way then are never kept, so
each sample takes its own branch or the replay refuses) or reduced it to a scalar (``d / d.max()``: over the batch of
samples), when a batch norm in training mode normalised a random draw (``network.train()``: the statistics of a batch
of samples would mix them), or when its draws are not ``k`` times the traced ones per input (a draw not made per batch
element, such as dropout on a weight or ``torch.randn(C, H, W)`` noise, which the ``k`` samples would share; see
:class:`_Draws`).
A network with a TorchScript or ``torch.compile`` submodule is refused (:class:`SharingUnavailable`): the trace cannot
see the operations inside it. Sharing assumes that every random operation of the network is a PyTorch one seen by
``__torch_function__`` (a random number drawn in NumPy or Python inside ``forward``, or in a TorchScript function that
it calls, is not seen), that what a call computes does not depend on Python state that its calls change (a call
counter: a replay calls the stochastic rest once for ``k`` samples, and the kept calls not at all), that the stochastic
rest computes each batch row from the same rows of its inputs apart from the full reductions above (a maximum over the
batch axis, ``d.amax(0)``, would mix the samples of a replay), and that a shared call's output, or a shared
operation's result, is batched along its first axis like the input and computes each batch row from the same rows of
its inputs (a softmax or cumulative sum across the batch axis of shared values would break it).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .._utils import check_integer, check_nonnegative, check_sample_batch_size, is_int, is_real
from ..measures import entropy_dtype

__all__ = ["SharedPasses", "SharingUnavailable", "hidden_submodule", "is_random_op", "auto_sample_batch",
           "sample_batch", "replay_working_bytes", "PlainTraces", "PLAIN_TRACES", "watch_input", "InputGuard",
           "AUTO_BATCH_FRACTION", "MAX_SAMPLE_BATCH", "MIN_SHARED_WORK"]

#: attribute set on a tensor whose value depends on a random draw (during a trace only)
_FLAG = "_monai_unc_stochastic"
#: names of PyTorch functions / tensor methods that draw random numbers
_RANDOM_NAMES = frozenset({
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli", "bernoulli_",
    "multinomial", "normal", "normal_", "uniform_", "exponential_", "geometric_", "cauchy_", "log_normal_",
    "random_", "poisson", "rrelu", "rrelu_", "rrelu_with_noise", "binomial", "_standard_gamma", "_sample_dirichlet",
    "gumbel_softmax",
})
#: dropout functions: random when ``training`` (or ``train``) is true and ``p > 0``
_DROPOUT_NAMES = frozenset({
    "dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "alpha_dropout_",
    "feature_alpha_dropout", "feature_alpha_dropout_", "feature_dropout", "feature_dropout_", "native_dropout",
})
#: functions that draw inside one operation (``__torch_function__`` sees only the outer call): name -> (position and
#: name of the dropout probability, position and name of the training flag, or None where there is none)
_DRAWING_NAMES: dict[str, tuple[int, str, int | None, str | None]] = {
    "scaled_dot_product_attention": (4, "dropout_p", None, None),
    "multi_head_attention_forward": (10, "dropout_p", 13, "training"),
}
#: conversions of a tensor to a Python value: on a stochastic tensor, the network's control flow may depend on it
_PYTHON_VALUES = frozenset({"__bool__", "item", "__float__", "__int__", "__index__", "__complex__", "tolist", "numpy",
                            "__array__", "__format__"})
#: the automatic sample batch uses at most this fraction of the case's stitched buffers (besides one sample)
AUTO_BATCH_FRACTION = 0.1
#: the largest automatic sample batch
MAX_SAMPLE_BATCH = 32
#: a trace whose kept calls hold less than this fraction of the pass's work (:func:`_work`) is replayed as plain
#: batched passes: following every operation of a replay would cost more than recomputing what it skips
MIN_SHARED_WORK = 0.1


class SharingUnavailable(RuntimeError):
    """The shared computation cannot reproduce a full pass for this call; the message says why."""


class _Unbatched(SharingUnavailable):
    """A replay drew other than ``k`` times the traced draws per input: a draw the ``k`` samples would share."""


def is_random_op(func: Callable, args: tuple = (), kwargs: dict | None = None) -> bool:
    """Whether calling ``func(*args, **kwargs)`` draws random numbers.

    Dropout functions count only when they are active (``training`` / ``train`` true and ``p > 0``), so that a
    network built with ``Dropout(p=0)`` or with dropout in eval mode shares everything; so do functions that drop
    inside one operation (``scaled_dot_product_attention`` with ``dropout_p > 0``, ``multi_head_attention_forward``
    in training). Fractional max pooling draws its regions unless ``_random_samples`` is given; Gumbel softmax and
    the samplers of ``torch.distributions`` always draw.

    Args:
        func: a PyTorch function or tensor method (as seen by ``__torch_function__``).
        args: its positional arguments.
        kwargs: its keyword arguments.

    Returns:
        True for a random draw.

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import is_random_op
        >>> x, dropout = torch.ones(2), torch.nn.functional.dropout
        >>> is_random_op(dropout, (x, 0.5, True)), is_random_op(dropout, (x, 0.5, False))
        (True, False)
        >>> is_random_op(torch.rand_like, (x,)), is_random_op(torch.add, (x, x))
        (True, False)
        >>> attention = torch.nn.functional.scaled_dot_product_attention
        >>> is_random_op(attention, (x, x, x), {"dropout_p": 0.1}), is_random_op(attention, (x, x, x))
        (True, False)
    """
    name = getattr(func, "__name__", "")
    if name in _RANDOM_NAMES:
        return True
    kwargs = kwargs or {}
    if "fractional_max_pool" in name:  # draws its pooling regions unless they are given
        return kwargs.get("_random_samples", args[5] if len(args) > 5 else None) is None
    if name in _DRAWING_NAMES:
        p_at, p_name, train_at, train_name = _DRAWING_NAMES[name]
        p = kwargs.get(p_name, args[p_at] if len(args) > p_at else 0.0)
        training = True if train_at is None else kwargs.get(train_name, args[train_at] if len(args) > train_at
                                                            else True)
    elif name in _DROPOUT_NAMES:
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        # F.alpha_dropout and F.feature_alpha_dropout default to training=False, the other dropouts to True
        default = "alpha" not in name
        training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else default))
    else:
        return False
    try:
        return bool(training) and float(p) > 0.0
    except (TypeError, ValueError):
        return True


#: argument types that hold no tensor (read without ``tree_flatten``, which costs more than most operations here)
_LEAVES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.Size, torch.layout,
           torch.memory_format, slice, type(Ellipsis))


def _collect(tree: Any, out: list[torch.Tensor]) -> None:
    if isinstance(tree, torch.Tensor):
        out.append(tree)
    elif type(tree) is tuple or type(tree) is list:
        for t in tree:
            _collect(t, out)
    elif type(tree) is dict:
        for t in tree.values():
            _collect(t, out)
    elif not isinstance(tree, _LEAVES):  # namedtuples, OrderedDicts, registered containers: as PyTorch sees them
        out.extend(t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors of a nested argument structure, in ``tree_flatten`` order (plain containers read directly)."""
    out: list[torch.Tensor] = []
    _collect(tree, out)
    return out


def _stochastic(tree: Any) -> bool:
    return any(getattr(t, _FLAG, False) for t in _tensors(tree))


_INPLACE_ARG: dict[Any, int | None] = {}


def _inplace_index(func: Callable) -> int | None:
    """Position of an ``inplace`` parameter of ``func`` (``F.relu(x, inplace)``), or None; cached per function."""
    try:
        return _INPLACE_ARG[func]
    except (KeyError, TypeError):
        pass
    try:
        names = list(inspect.signature(func).parameters)
        index = names.index("inplace") if "inplace" in names else None
    except (TypeError, ValueError):
        index = None
    try:
        _INPLACE_ARG[func] = index
    except TypeError:
        pass
    return index


def _mutated(func: Callable, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an operation writes into.

    In-place methods (``add_``, ``__iadd__``, ``__setitem__``), ``out=`` and ``inplace=True`` functions.
    """
    name = getattr(func, "__name__", "")
    first = [args[0]] if args and isinstance(args[0], torch.Tensor) else []
    if (name.endswith("_") and not name.startswith("__")) or name == "__setitem__" or (
        name.startswith("__i") and name.endswith("__")
    ):
        return first
    out = _tensors(kwargs.get("out"))
    if kwargs.get("inplace") is True:
        return first + out
    index = _inplace_index(func)
    if index is not None and len(args) > index and args[index] is True:
        return first + out
    return out


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return id(t)


def _version(t: torch.Tensor) -> int | None:
    """The version counter of ``t`` (bumped by every in-place write), None for an inference tensor (it has none)."""
    try:
        return int(t._version)
    except RuntimeError:
        return None


def _input_changed(x: torch.Tensor, storage: int, version: int | None, before: torch.Tensor) -> bool:
    """Whether a call wrote into its input ``x``: the one predicate of :func:`watch_input` and :class:`InputGuard`.

    A write is a changed storage or version counter of ``x`` (``storage``, ``version``: :func:`_storage` and
    :func:`_version` before the call); an inference tensor has no version counter (``version`` None): its values are
    compared with ``before``, its copy from before the call, bit for bit (a NaN equals itself).
    """
    return _storage(x) != storage or _version(x) != version or (version is None and not _same_bits(x, before))


def watch_input(run: Callable[[torch.Tensor], Any], x: torch.Tensor) -> tuple[Any, torch.Tensor | None]:
    """``run(x)``, and a copy of ``x`` as it was before when the call wrote into it (None when it did not).

    A write is a changed storage or version counter of ``x`` (an inference tensor has no version counter: its
    values are compared). The copy is what :meth:`SharedPasses.trace` keeps for its replays of a network that writes
    into its input; the inferers start the later full passes of such a window from it (a copy each).

    Args:
        run: the call (the network with its arguments).
        x: its input.

    Returns:
        ``(run(x), before)``: ``before`` the input's values before the call where it wrote into them, else None.

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import watch_input
        >>> x = torch.ones(2)
        >>> out, before = watch_input(lambda t: t.mul_(3), x)
        >>> x.tolist(), before.tolist(), watch_input(lambda t: t * 3, x)[1] is None
        ([3.0, 3.0], [1.0, 1.0], True)
    """
    before = x.clone()
    storage, version = _storage(x), _version(x)
    out = run(x)
    return out, (before if _input_changed(x, storage, version, before) else None)


class InputGuard:
    """An input as given, put back into it after a call that wrote into it (:meth:`restore`).

    The inferers guard each window's input with it: in earlier versions a network that writes into its input
    (``x.mul_(2)``, an in-place normalisation) gave each later sample the input as the earlier samples had left it (MC
    dropout without shared passes, the identity variant of TTA, the Rate-In search pass, overlapping sliding windows,
    which are views of the input), so the maps depended on the order of the samples, and the caller's tensor came
    back modified. A write is a changed storage or version counter (an inference tensor has none: its values are
    compared). The copy is the size of the input.

    Args:
        x: the input ``(B, C, *spatial)`` (any tensor).

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import InputGuard
        >>> x = torch.ones(2)
        >>> guard = InputGuard(x)
        >>> _ = x.mul_(3)
        >>> guard.restore()
        >>> x.tolist()
        [1.0, 1.0]
    """

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self.pristine = x.detach().clone()
        self._mark()

    def _mark(self) -> None:
        self.storage, self.version = _storage(self.x), _version(self.x)

    def restore(self) -> None:
        """Copy the input as given back into it when a call wrote into it (else nothing)."""
        if not _input_changed(self.x, self.storage, self.version, self.pristine):
            return
        with torch.no_grad():
            self.x.copy_(self.pristine)
        self._mark()


#: the integer type of each floating type's size, to compare floating values bit for bit (:func:`_same_bits`)
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` (same shape and dtype) hold the same values bit for bit: a NaN equals itself.

    ``torch.equal`` is False for tensors holding NaN: :class:`InputGuard` took an unwritten inference tensor holding
    a NaN for a written one and wrote it back, which torch refuses outside ``torch.inference_mode`` (in earlier
    versions).
    """
    bits = _BITS.get(a.dtype)
    if bits is None or a.dtype != b.dtype:
        return torch.equal(a, b)
    return torch.equal(a.view(bits), b.view(bits))


def _numel(out: Any, mutated: list[torch.Tensor]) -> int:
    """Elements of the tensors that an operation returned or wrote into (each tensor once)."""
    ts = {id(t): t for t in [*_tensors(out), *mutated]}
    return sum(t.numel() for t in ts.values())


#: functions whose work is the multiply-adds of a weight per output element (convolutions, linear maps)
_WEIGHTED = frozenset({"conv1d", "conv2d", "conv3d", "linear", "bilinear"})
#: where a weighted function takes its weight (``bilinear(input1, input2, weight)``; the others ``(input, weight)``)
_WEIGHT_AT = {"bilinear": 2}
_TRANSPOSED = frozenset({"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})
_PRODUCTS = frozenset({"matmul", "mm", "bmm", "__matmul__", "__rmatmul__", "addmm", "baddbmm", "addbmm"})


def _einsum_work(args: tuple, n_out: int) -> int:
    """Multiply-adds of ``torch.einsum(equation, *operands)``.

    The output's elements times the sizes of the indices that are summed over (those of the operands missing from the
    output); ``n_out`` when the equation does not parse.
    """
    eq = args[0] if args and isinstance(args[0], str) else None
    ops = args[1:]
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    if eq is None or not ops or not all(isinstance(t, torch.Tensor) for t in ops):
        return n_out
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        return n_out
    sizes: dict[str, int] = {}
    for term, t in zip(terms, ops):
        head, dots, tail = term.partition("...")
        for k, c in enumerate(head):
            sizes[c] = int(t.shape[k])
        for k, c in enumerate(reversed(tail)):
            sizes[c] = int(t.shape[t.ndim - 1 - k])
    if not arrow:  # implicit output: the indices that appear once, in order
        rhs = "".join(c for c in sorted(sizes) if lhs.count(c) == 1)
    summed = 1
    for c, size in sizes.items():
        if c not in rhs:
            summed *= max(size, 1)
    return n_out * summed


def _work(func: Callable, args: tuple, kwargs: dict, out: Any) -> int:
    """A rough count of the arithmetic of one operation, to weigh what a replay skips against what it runs.

    Convolutions and linear maps: multiply-adds (output elements times the weight's elements per output channel;
    a transposed convolution: input elements times its weight's elements per input channel); matrix products:
    output elements times the inner size (times the batch that ``addbmm`` sums over); ``einsum``: output elements
    times the sizes summed over; ``scaled_dot_product_attention``: both products, ``L S (E + Ev)`` per batch entry;
    anything else: the elements it returns.
    """
    name = getattr(func, "__name__", "")
    n = sum(t.numel() for t in _tensors(out))
    try:
        if name in _WEIGHTED:
            at = _WEIGHT_AT.get(name, 1)
            w = kwargs.get("weight", args[at] if len(args) > at else None)
            return n * max(int(w[0].numel()), 1) if isinstance(w, torch.Tensor) and w.ndim >= 2 else n
        if name in _TRANSPOSED:
            x, w = args[0], kwargs.get("weight", args[1] if len(args) > 1 else None)
            if isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and w.ndim >= 2:
                return int(x.numel()) * max(int(w[0].numel()), 1)
        if name in _PRODUCTS:
            if name == "__rmatmul__":  # ``other @ self``: the inner size is the first axis of a matrix ``self``
                b = args[0]
                if isinstance(b, torch.Tensor) and b.ndim >= 1:
                    return n * max(int(b.shape[-2] if b.ndim >= 2 else b.shape[0]), 1)
                return n
            a = args[-2] if name in ("addmm", "baddbmm", "addbmm") and len(args) >= 3 else args[0]
            if isinstance(a, torch.Tensor) and a.ndim >= 1:
                batch = int(a.shape[0]) if name == "addbmm" and a.ndim == 3 else 1  # the batch it sums over
                return n * max(int(a.shape[-1]), 1) * max(batch, 1)
        if name == "einsum":
            return _einsum_work(args, n)
        if name == "scaled_dot_product_attention":
            q, k, v = (kwargs.get(key, args[i] if len(args) > i else None) for i, key in enumerate(("query", "key",
                                                                                                      "value")))
            if all(isinstance(t, torch.Tensor) and t.ndim >= 2 for t in (q, k, v)):
                rows = n // max(int(v.shape[-1]), 1)  # batch entries times L
                return rows * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))
    except (IndexError, TypeError, KeyError):
        pass
    return n


def _batch_statistics(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether ``func(*args, **kwargs)`` reduces over the batch axis: ``batch_norm`` in training mode.

    ``F.batch_norm(input, running_mean, running_var, weight, bias, training, ...)`` (``torch.batch_norm`` takes
    ``training`` at the same place): a ``BatchNorm`` layer left in training mode, as ``network.train()`` leaves it.
    """
    if getattr(func, "__name__", "") != "batch_norm":
        return False
    training = kwargs.get("training", args[5] if len(args) > 5 else False)
    try:
        return bool(training)
    except (TypeError, RuntimeError):
        return True


class _Draws(TorchFunctionMode):
    """Counts the elements that the random operations of a replay draw.

    A replay of ``k`` samples of ``r`` inputs draws ``k r / B`` times what the trace of ``B`` inputs drew when every
    draw is made per batch element; a draw that is not (one mask for a weight, noise of a fixed shape such as
    ``torch.randn(C, H, W)`` or ``(1, C, 1, 1)``) would be shared by the ``k`` samples of the replay.
    """

    def __init__(self) -> None:
        super().__init__()
        self.drawn = 0

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if is_random_op(func, args, kwargs):
            self.drawn += _numel(out, _mutated(func, args, kwargs))
        return out


class _Follow(TorchFunctionMode):
    """Follows the random draws of one pass.

    Marks the outputs of random operations and of operations with a marked input, sums their bytes, and records the
    last step at which each storage was written in place.
    """

    def __init__(self, stack: list[_Call]) -> None:
        super().__init__()
        self.stochastic_bytes = 0
        self.step = 0
        self.written: dict[int, int] = {}
        self.stack = stack
        #: (id of an input tensor, the innermost module call of the operation that read it)
        self.uses: list[tuple[int, _Call | None]] = []
        #: > 0 while the trace's own bookkeeping reads shapes (not a use by the network)
        self.paused = 0
        #: an operation with a random draw or a stochastic input wrote into a tensor that was not stochastic
        self.stochastic_write = False
        #: (elements drawn by a random operation, the innermost module call that drew them; see :class:`_Draws`)
        self.draws: list[tuple[int, _Call | None]] = []
        #: a stochastic tensor was turned into a Python value (``if x.mean() > 0``, ``.item()``: the network's control
        #: flow may differ between samples) or reduced to a scalar across its batch axis (``d / d.max()``): a batch of
        #: samples would share what each sample computes on its own
        self.per_sample = False
        #: (work of an operation, see :func:`_work`; the innermost module call that ran it)
        self.work: list[tuple[int, _Call | None]] = []

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        mutated = _mutated(func, args, kwargs)
        out = func(*args, **kwargs)
        self.step += 1
        top = self.stack[-1] if self.stack else None
        self.work.append((_work(func, args, kwargs, out), top))
        self.uses.extend((id(t), top) for t in _tensors((args, kwargs)))
        for t in mutated:
            self.written[_storage(t)] = self.step
        random = is_random_op(func, args, kwargs)
        if random:
            self.draws.append((_numel(out, mutated), top))
        if random or _stochastic((args, kwargs)):
            if getattr(func, "__name__", "") in _PYTHON_VALUES or (
                any(t.ndim == 0 for t in _tensors(out))
                and any(t.ndim > 0 and getattr(t, _FLAG, False) for t in _tensors((args, kwargs)))
            ):
                self.per_sample = True
                # the calls under way branched on (or scaled by) a draw: their outputs may differ between samples
                # even where no stochastic tensor reaches them (a layer-drop ``if torch.rand(()) < p: return x``),
                # so none of them is kept
                for c in self.stack:
                    c.branched = True
            if _batch_statistics(func, args, kwargs):
                # batch norm in training mode normalises with the statistics of the whole batch: the k samples of a
                # replay batch would see each other's draws, so they run one at a time (as in a full pass)
                self.per_sample = True
            if any(not getattr(t, _FLAG, False) for t in mutated):
                self.stochastic_write = True
            # the tensors written in place too: ``__setitem__`` returns None, ``out=`` may differ from the result
            for t in [*_tensors(out), *mutated]:
                if not getattr(t, _FLAG, False):
                    self.stochastic_bytes += t.numel() * t.element_size()
                setattr(t, _FLAG, True)
        return out


@dataclass(eq=False)
class _Call:
    """One module call of the trace."""

    module: nn.Module
    parent: _Call | None
    output: Any = None
    end_step: int = -1
    kept_below: list[_Call] = field(default_factory=list)
    input_shape: tuple[int, ...] | None = None
    needed: bool = True
    #: a Python value or a scalar was taken from a random draw during this call (see ``_Follow.per_sample``)
    branched: bool = False

    def skipped(self) -> bool:
        """Whether a replay skips this call (it is kept, or inside a kept call)."""
        return self.output is not None or self.inside_kept()

    def inside_kept(self) -> bool:
        p = self.parent
        while p is not None:
            if p.output is not None:
                return True
            p = p.parent
        return False


def _wrote_into(inputs: list[torch.Tensor], before: list[tuple[int, int | None]], written: dict[int, int],
                start: int) -> bool:
    """Whether a module call wrote into one of its input tensors (``ReLU(inplace=True)`` on its input, ``x += y``).

    Such a call has an effect beyond its output: a replay that skips it would leave the input as it was before the
    call, and whatever reads the input afterwards (a decoder's skip connection) would read other values than in a
    full pass. A write is an operation seen writing into an input's storage after step ``start`` (``written``: the
    last step that wrote each storage), or a changed version counter (a write the trace does not recognise by name).

    Args:
        inputs: the call's input tensors.
        before: ``(storage, version)`` of each input before the call.
        written: storage -> the last step that wrote into it (:class:`_Follow`).
        start: the trace's step when the call began.
    """
    for t, (storage, version) in zip(inputs, before):
        if written.get(storage, -1) > start or _version(t) != version:
            return True
    return False


def _first_shape(args: Any) -> tuple[int, ...] | None:
    ts = _tensors(args)
    return tuple(ts[0].shape) if ts else None


def _batched(out: Any, batch: int) -> bool:
    ts = _tensors(out)
    return bool(ts) and all(t.ndim >= 1 and t.shape[0] == batch for t in ts)


def _repeat(out: Any, k: int) -> Any:
    """``out`` repeated ``k`` times along the batch axis (always a new tensor, so in-place use is harmless)."""
    def rep(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.repeat(k, *([1] * (t.ndim - 1)))
        return t
    return tree_map(rep, out)


def _placeholder(out: Any, k: int) -> Any:
    """A view of ``out`` with ``k`` times its batch (no copy): for kept outputs that only kept calls read."""
    def view(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t[:1].expand(k * t.shape[0], *t.shape[1:])
        return t

    return tree_map(view, out)


#: attribute of a tensor that a replay hands out for a shared value: ``(the replay's _Share, the batch-1 value)``
_SHARED = "_monai_unc_shared"


def _meta(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return t


class _Share(TorchFunctionMode):
    """The replay of a batch-1 trace: an operation on shared values only runs once, on their batch-1 values.

    A shared value (a kept output, the input, or the result of an operation on shared values only) is handed to the
    network as a view of its batch-1 value expanded to the ``k`` samples (no copy; its values and shape are those of
    ``k`` repeated copies). An operation whose tensor arguments are all shared values or the network's parameters and
    buffers runs on the batch-1 values, and its result is handed on expanded, when its result keeps the batch axis:
    every result batched with batch 1, and the same call on the expanded arguments (evaluated on the ``meta``
    device, shapes only) gives batch ``k`` and the same other sizes. Every other operation runs as usual on the
    expanded views (a stochastic operation broadcasts a shared operand; ``torch.cat`` copies it); one that fails on
    an expanded view (``view`` of an expanded axis) runs again on materialised copies. An operation that writes into
    a shared value is only allowed when all its arguments are shared (it writes into the batch-1 value, which the
    expanded view shows); the trace makes the replay fall back to plain copies when the traced pass wrote a
    stochastic value into a non-stochastic tensor.
    """

    def __init__(self, k: int, constants: set[int]) -> None:
        super().__init__()
        self.k = k
        self.constants = constants
        #: > 0 while the replay's own bookkeeping runs (handing out kept outputs, reading shapes)
        self.paused = 0
        #: operations computed once on batch-1 values (for tests and benchmarks)
        self.shared_ops = 0

    def hand_out(self, tree: Any) -> Any:
        """``tree``'s batch-1 tensors as shared values: expanded to ``k`` samples, no copy."""

        def one(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            view = t.expand(self.k, *t.shape[1:])
            setattr(view, _SHARED, (self, t))
            return view

        self.paused += 1
        try:
            return tree_map(one, tree)
        finally:
            self.paused -= 1

    def base(self, t: Any) -> torch.Tensor | None:
        """The batch-1 value of a shared value handed out by this replay, else None."""
        ref = getattr(t, _SHARED, None) if isinstance(t, torch.Tensor) else None
        return ref[1] if ref is not None and ref[0] is self else None

    def _constant(self, t: torch.Tensor) -> bool:
        return id(t) in self.constants or t.ndim == 0

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused or all(self.base(t) is None for t in _tensors((args, kwargs))):
            return func(*args, **kwargs)
        flat, spec = tree_flatten((args, kwargs))
        bases = [self.base(a) for a in flat]
        mutated = _mutated(func, args, kwargs)
        if not is_random_op(func, args, kwargs) and all(
            b is not None or not isinstance(a, torch.Tensor) or self._constant(a) for a, b in zip(flat, bases)
        ):
            done, out = self._once(func, flat, spec, bases, mutated)
            if done:
                return out
        if any(self.base(t) is not None for t in mutated):
            raise SharingUnavailable(
                f"{getattr(func, '__name__', func)} writes a per-sample value into a value shared by the samples"
            )
        try:
            return func(*args, **kwargs)
        except RuntimeError:  # e.g. ``view`` across the expanded batch axis: on plain copies
            a, kw = tree_unflatten([a if b is None else _repeat(b, self.k) for a, b in zip(flat, bases)], spec)
            return func(*a, **kw)

    def _once(self, func: Callable, flat: list, spec: Any, bases: list, mutated: list) -> tuple[bool, Any]:
        """Run ``func`` on the batch-1 values; ``(False, None)`` when its result is not a shared value."""
        a1, kw1 = tree_unflatten([a if b is None else b for a, b in zip(flat, bases)], spec)
        if mutated:  # in place into shared values: the batch-1 values change, the expanded views show it
            if any(self.base(t) is None for t in mutated):
                return False, None
            try:
                out = func(*a1, **kw1)
            except Exception as err:  # noqa: BLE001
                name = getattr(func, "__name__", func)
                raise SharingUnavailable(f"{name} fails on the shared values: {err}") from err
            self.shared_ops += 1
            by_base = {id(b): a for a, b in zip(flat, bases) if b is not None}
            return True, tree_map(lambda t: by_base.get(id(t), t) if isinstance(t, torch.Tensor) else t, out)
        try:
            out = func(*a1, **kw1)
        except Exception:  # noqa: BLE001 - an operation that fails on batch 1 runs as usual on the expanded views
            return False, None
        got = tree_flatten(out)[0]
        if not got or not all(isinstance(t, torch.Tensor) and t.ndim >= 1 and t.shape[0] == 1 for t in got):
            return False, None
        try:  # the result of the same call on the expanded arguments: shapes only
            am, kwm = tree_unflatten([_meta(a) for a in flat], spec)
            logical = tree_flatten(func(*am, **kwm))[0]
        except Exception:  # noqa: BLE001 - no meta kernel: not shared
            return False, None
        if len(logical) != len(got) or not all(
            isinstance(s, torch.Tensor) and tuple(s.shape) == (self.k, *t.shape[1:]) for t, s in zip(got, logical)
        ):
            return False, None
        self.shared_ops += 1
        return True, self.hand_out(out)


@contextmanager
def _wrapped_forwards(modules: list[nn.Module], make: Callable[[nn.Module, Callable], Callable]) -> Iterator[None]:
    saved: list[tuple[nn.Module, bool, Any]] = []
    try:
        for m in modules:
            own = "forward" in m.__dict__
            saved.append((m, own, m.__dict__.get("forward")))
            m.forward = make(m, m.forward)
        yield
    finally:
        for m, own, fwd in saved:
            if own:
                m.forward = fwd
            else:
                del m.forward


def _rate_in_layers(network: nn.Module) -> list[Any]:
    """Layers that may hold one dropout rate per input (Rate-In: ``mode`` and ``rates``).

    Modules, and the ``layer`` of forward hooks.
    """
    found = []
    for m in network.modules():
        found.append(m)
        found += [getattr(h, "layer", None) for h in m._forward_hooks.values()]
    return [m for m in found if hasattr(m, "rates") and hasattr(m, "mode")]


@contextmanager
def _repeat_rates(layers: list[Any], batch: int, k: int, row: int | None = None) -> Iterator[None]:
    """Rate-In layers in ``"fixed"`` mode hold one rate per input: repeat them for ``k`` copies of the batch.

    With ``row``, the replay runs input ``row`` of the batch alone: its rate is repeated ``k`` times.
    """
    saved = []
    try:
        for layer in layers:
            rates = getattr(layer, "rates", None)
            if layer.mode != "fixed" or not isinstance(rates, torch.Tensor) or rates.numel() != batch:
                continue
            mine = rates if row is None or batch == 1 else rates.reshape(-1)[row:row + 1]
            mine = mine.repeat(k) if k > 1 else mine
            if mine is not rates:
                saved.append((layer, rates))
                layer.rates = mine
        yield
    finally:
        for layer, rates in saved:
            layer.rates = rates


def _merge(outs: list[Any], join: Callable[[list[torch.Tensor]], torch.Tensor], between: str) -> Any:
    """The outputs of several replays as one output: each tensor leaf ``join``-ed across ``outs``.

    Raises:
        SharingUnavailable: when the outputs differ in structure (``between``: whose outputs, for the message).
    """
    flat, spec = tree_flatten(outs[0])
    rest = [tree_flatten(o) for o in outs[1:]]
    if any(s != spec or len(f) != len(flat) for f, s in rest):
        raise SharingUnavailable(f"the network's outputs differ in structure between {between}")
    merged = [join([leaf, *(f[i] for f, _ in rest)]) if isinstance(leaf, torch.Tensor) else leaf
              for i, leaf in enumerate(flat)]
    return tree_unflatten(merged, spec)


def _concat(outs: list[Any]) -> Any:
    """Outputs of one-sample replays as the output of one replay: sample ``s`` of input ``b`` at ``s B + b``."""
    return _merge(outs, torch.cat, "samples")


def _interleave(outs: list[Any], k: int) -> Any:
    """The outputs of the inputs of a batch replayed one by one, ``k`` samples each, as one batch.

    Sample ``s`` of input ``b`` is at ``s B + b`` (``B = len(outs)``), as in a replay of the whole batch.

    Raises:
        SharingUnavailable: when the outputs do not have ``k`` rows each and the same structure.
    """
    def join(rows: list[torch.Tensor]) -> torch.Tensor:
        if any(t.ndim < 1 or t.shape[0] != k or t.shape != rows[0].shape for t in rows):
            raise SharingUnavailable("an output of the network is not batched like its input")
        return torch.stack(rows, dim=1).flatten(0, 1)

    return _merge(outs, join, "the inputs of a batch")


def hidden_submodule(network: nn.Module) -> str | None:
    """Why a trace cannot follow a submodule of ``network``, or None when it can follow them all.

    The operations of a TorchScript submodule (scripted or traced) do not reach ``__torch_function__``: a random draw
    inside it is not seen, so its output would be kept and its draw shared by every sample. A ``torch.compile``
    submodule (or one compiled in place, ``Module.compile()``, the network itself included) runs dynamo over the
    wrapped ``forward`` methods, which fails or hides its operations the same way. :class:`SharedPasses` raises
    :class:`SharingUnavailable` with this reason; the inferers ask it once per window before they trace.

    Args:
        network: the network.

    Returns:
        The reason, naming the submodule (``"submodule 'block'"``, or ``"the network"``), or None.

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import hidden_submodule
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.Dropout(0.5))
        >>> hidden_submodule(net) is None
        True
        >>> net[0] = torch.compile(net[0])  # compiled on its first call; a torch.jit.script'ed layer is named too
        >>> hidden_submodule(net)
        "submodule '0' is compiled (torch.compile): the trace cannot follow its operations"
    """
    def scripted(m: nn.Module) -> bool:
        return m is not network and isinstance(m, torch.jit.ScriptModule)

    def compiled(m: nn.Module) -> bool:
        return getattr(m, "_compiled_call_impl", None) is not None or type(m).__name__ == "OptimizedModule"

    # one walk without names first (the usual answer, None): a name for every module was a third of the time a
    # SharedPasses took to build for the example UNet
    if not any(scripted(m) or compiled(m) for m in network.modules()):
        return None
    for name, m in network.named_modules():
        where = f"submodule {name!r}" if name else "the network"
        if scripted(m):
            return f"{where} is a TorchScript module: the trace cannot see its operations (random draws included)"
        if compiled(m):
            return f"{where} is compiled (torch.compile): the trace cannot follow its operations"
    return None


class SharedPasses:
    """The shared part of a network's samples on one input: trace once, then replay the stochastic rest in batches.

    Use one object per input (per sliding window and test-time-augmentation variant): :meth:`trace` runs the first
    sample and keeps the shared activations; :meth:`replay` runs ``k`` further samples at once. See the module
    docstring for what is shared and why the result is exact.

    When the kept calls hold less than ``min_shared_work`` of the pass's arithmetic (convolutions and linear maps
    counted as multiply-adds, other operations as the elements they return), e.g. a U-Net with dropout in every
    stage, where only the first block is shared, the replays run as plain batched passes: the input repeated ``k``
    times, every call computed, only the draws counted (:attr:`plain`). Following every operation of a replay costs
    Python time per operation, which on a GPU with a small network is more than the skipped work saves.

    Args:
        network: the network (its ``forward`` and its submodules' are wrapped during each call, then restored).
        min_shared_work: the least fraction of the work that the kept calls must hold for the replays to skip
            them, in [0, 1]; None: :data:`MIN_SHARED_WORK` (0.1). 0 always shares what can be shared.

    Raises:
        TypeError: when ``network`` is not a ``torch.nn.Module``.
        ValueError: when ``min_shared_work`` is not in [0, 1].
        SharingUnavailable: when a submodule hides its operations from the trace (a TorchScript module, a
            ``torch.compile`` one, or a module compiled in place with ``Module.compile()``): a random draw inside it
            would be shared by all samples; the inferers then run full passes and say why in one log line.

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import SharedPasses
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.Dropout2d(0.5),
        ...                           torch.nn.Conv2d(8, 2, 1)).eval()
        >>> _ = net[1].train()  # MC dropout
        >>> x = torch.rand(1, 1, 8, 8)
        >>> passes = SharedPasses(net)
        >>> first = passes.trace(net, x)          # sample 1; keeps the first convolution's output
        >>> more = passes.replay(net, x, 4)       # samples 2-5 in one batch, the first convolution not rerun
        >>> first.shape, more.shape, passes.shared_calls
        (torch.Size([1, 2, 8, 8]), torch.Size([4, 2, 8, 8]), 1)
    """

    def __init__(self, network: nn.Module, min_shared_work: float | None = None) -> None:
        if not isinstance(network, nn.Module):
            raise TypeError(f"network must be a torch.nn.Module to share its passes, got {type(network).__name__}")
        if isinstance(network, torch.jit.ScriptModule):
            raise TypeError("network is a TorchScript module: its calls cannot be followed")
        # numpy numbers too (found by hostile testing: numpy.float32(0.5) was refused)
        if min_shared_work is not None and (not is_real(min_shared_work)
                                            or not 0.0 <= float(min_shared_work) <= 1.0):
            raise ValueError(f"min_shared_work must be a number in [0, 1] or None, got {min_shared_work!r}")
        hidden = hidden_submodule(network)
        if hidden is not None:
            raise SharingUnavailable(hidden)
        self.network = network
        self._min_shared_work = min_shared_work
        #: the fraction of the traced pass's work (:func:`_work`) inside the kept calls, which a replay skips
        self.skipped_work = 0.0
        #: the replays run as plain batched passes (the kept calls hold less than ``min_shared_work`` of the work)
        self.plain = False
        self._modules = [m for m in network.modules() if not isinstance(m, torch.jit.ScriptModule)]
        self._plan: dict[nn.Module, list[_Call]] = {}
        self._kept: list[_Call] = []
        self._input: torch.Tensor | None = None
        #: the traced input as it was before the traced pass wrote into it (None: the pass did not write into it)
        self._pristine: torch.Tensor | None = None
        self._batch = 0
        self._once = False
        self._constants: set[int] = set()
        self._rate_layers: list[Any] = []
        #: elements drawn by the traced pass's random operations
        self._drawn = 0
        self._drawn_all = 0
        #: replay one sample at a time (a sample's control flow or draws would otherwise mix with the others')
        self._per_sample = False
        #: a replay's draws were counted with k samples of r inputs, k r != B: every draw is made per batch element
        self._draws_checked = False
        #: operations that the last replay computed once on batch-1 values (besides the kept module calls)
        self.shared_ops = 0
        #: bytes of the tensors that depend on a random draw in the traced sample (an upper bound of one sample's
        #: stochastic working memory)
        self.stochastic_bytes = 0
        #: bytes of the kept (shared) activations (0 for :attr:`plain` replays: nothing is kept)
        self.shared_bytes = 0
        #: bytes of the kept activations that the stochastic rest reads (copied once per replayed sample; all the
        #: kept outputs for :attr:`plain` replays, which compute them again)
        self.copied_bytes = 0
        #: bytes that the traced sample held: its kept activations and its stochastic tensors
        self.traced_bytes = 0
        #: bytes of the traced sample's output (the network's output for the ``B`` inputs)
        self.output_bytes = 0
        #: bytes of the kept activations that the stochastic rest reads (what a replay of the whole batch copies)
        self._needed_bytes = 0

    @property
    def shared_calls(self) -> int:
        """How many module calls are computed once and reused (outermost ones only; 0 for :attr:`plain` replays)."""
        return 0 if self.plain else len(self._kept)

    @property
    def wrote_input(self) -> bool:
        """Whether the traced pass wrote into its input (the replays then start from a copy taken before it)."""
        return self._pristine is not None

    @property
    def traced(self) -> bool:
        """Whether :meth:`trace` ran."""
        return self._input is not None

    def per_sample_bytes(self) -> int:
        """Working memory that one more sample of a replay of the whole batch adds: stochastic tensors, shared copies.

        :meth:`replay_bytes` is the working memory of the replay that :meth:`replay` makes.
        """
        return int(self.stochastic_bytes + self.copied_bytes)

    @property
    def replays_rows(self) -> bool:
        """Whether a replay of ``k >= 2`` samples runs the traced batch one input at a time (see :meth:`replay`)."""
        return self._once and self._batch > 1 and not self.plain and not self._per_sample

    def replay_bytes(self, k: int, after_bytes: int = 0) -> int:
        """Working memory that :meth:`replay` of ``k`` samples needs, by the way it will run them.

        A replay of the whole batch holds each sample's stochastic tensors and shared copies
        (:meth:`per_sample_bytes`), and ``after_bytes`` per sample that the caller then makes from the output (the
        probabilities) beside it. A replay of ``k >= 2`` samples of a batch of ``B > 1`` inputs one input at a time
        (:attr:`replays_rows`) holds one input's stochastic tensors for ``k`` samples (``1 / B`` of the traced
        sample's) beside the outputs of the inputs before it, then the ``B`` outputs and their interleaved copy, then
        the output and what the caller makes from it: per sample the largest of ``r / B + o (B - 1) / B``, ``2 o``
        and ``o + after_bytes`` (``r``: :attr:`stochastic_bytes`, ``o``: :attr:`output_bytes`); the first replay of
        ``k = B <= 3`` samples runs the whole batch with the kept values that the stochastic rest reads copied for
        every sample (a count of draws that tells whether a draw is shared), and so does a replay of one sample
        (``k = 1``) of such a batch. One sample at a time (a draw a batch would share): one sample's replay beside
        the outputs of the earlier ones, then their concatenation.

        Args:
            k: samples of the replay, ``>= 1``.
            after_bytes: bytes per sample that the caller makes from the replay's output while it is alive (its
                probabilities).

        Returns:
            Bytes.

        Raises:
            ValueError: ``k`` not an integer ``>= 1``, ``after_bytes`` not a finite number ``>= 0``.
            TypeError: ``after_bytes`` not a number.

        Example:
            >>> import torch
            >>> from monai_unc.networks.shared import SharedPasses
            >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.Dropout2d(0.5),
            ...                           torch.nn.Conv2d(8, 2, 1))
            >>> passes = SharedPasses(net)
            >>> _ = passes.trace(net, torch.rand(4, 1, 16, 16))  # four windows: replayed one at a time
            >>> passes.replays_rows, passes.replay_bytes(8) < 8 * passes.per_sample_bytes()
            (True, True)
        """
        # checked (found by hostile testing: k = 2.7 counted 2 samples, True and -3 one, a negative after_bytes none)
        k = check_integer(k, "k")
        after = math.ceil(check_nonnegative(after_bytes, "after_bytes"))
        o = int(self.output_bytes)
        if self._per_sample and k > 1:  # one at a time, then concatenated
            one = self.replay_bytes(1, after)
            return max(one + (k - 1) * o, 2 * k * o + k * after)
        if k == 1 and self._once and self._batch > 1 and not self.plain:
            # one sample of a batch of several inputs replays the whole batch, the kept values that the stochastic
            # rest reads copied (found by hostile testing: four windows of 40^3 measured 33.6 MiB, counted 18.6 MiB)
            return replay_working_bytes(1, 1, self.stochastic_bytes, o, after, copied=self._needed_bytes)
        return replay_working_bytes(k, self._batch if self.replays_rows else 1, self.stochastic_bytes, o, after,
                                    copied=self.copied_bytes, first_copies=None if self._draws_checked
                                    else self._needed_bytes)

    def trace(self, predictor: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Any:
        """Run the first sample: ``predictor(x)`` with the shared calls followed and kept.

        Args:
            predictor: calls the network on its argument (the network with its extra arguments).
            x: the input ``(B, C, *spatial)``.

        Returns:
            The network output of this sample.

        Raises:
            TypeError: when ``x`` is not a tensor.
            ValueError: when ``x`` has no batch axis (0-d).
        """
        if not isinstance(x, torch.Tensor):  # found by hostile testing: AttributeError 'numpy.ndarray' ... 'clone'
            raise TypeError(f"x must be a torch.Tensor with a batch axis, got {type(x).__name__}")
        if x.ndim < 1:
            raise ValueError(f"x must have a batch axis, got a tensor of shape {tuple(x.shape)}")
        self._batch = int(x.shape[0])
        calls: dict[nn.Module, list[_Call]] = {m: [] for m in self._modules}
        stack: list[_Call] = []
        batch = self._batch
        follow = _Follow(stack)

        def make(m: nn.Module, fwd: Callable) -> Callable:
            def forward(*args: Any, **kwargs: Any) -> Any:
                follow.paused += 1
                try:
                    call = _Call(m, stack[-1] if stack else None, input_shape=_first_shape((args, kwargs)))
                    inputs = _tensors((args, kwargs))
                    before = [(_storage(t), _version(t)) for t in inputs]
                finally:
                    follow.paused -= 1
                calls[m].append(call)
                quiet_in = not _stochastic((args, kwargs))
                start = follow.step
                stack.append(call)
                try:
                    out = fwd(*args, **kwargs)
                finally:
                    stack.pop()
                below = call.kept_below
                follow.paused += 1
                try:
                    keep = (quiet_in and not call.branched and not _stochastic(out) and _batched(out, batch)
                            and not _wrote_into(inputs, before, follow.written, start))
                finally:
                    follow.paused -= 1
                if keep:
                    for c in below:  # only the outermost shared call keeps its output
                        c.output = None
                    call.output = out
                    call.end_step = follow.step
                    call.kept_below = []
                    if call.parent is not None:
                        call.parent.kept_below.append(call)
                elif call.parent is not None:
                    call.parent.kept_below.extend(below)
                    call.kept_below = []
                return out
            return forward

        # a network may write into its input (``x.sub_(mean)``): the replays start from this copy. It is taken before
        # the pass, not just before the first write the pass is seen to make: a write no operation shows (through
        # ``x.numpy()``, ``x.data = ...``, ``x.set_(...)``, a scripted module) may come first
        pristine = x.clone()
        storage, version = _storage(x), _version(x)
        with _wrapped_forwards(self._modules, make), follow:
            out = predictor(x)
        roots = [c for cs in calls.values() for c in cs if c.parent is None]
        kept = [c for cs in calls.values() for c in cs if c.output is not None and not c.inside_kept()]
        # a kept output changed in place after it was kept: not reusable, recomputed in every replay
        for c in kept:
            if any(follow.written.get(_storage(t), -1) > c.end_step for t in _tensors(c.output)):
                c.output = None
        self._kept = [c for c in kept if c.output is not None]
        # a kept output that only kept calls read (an encoder feature consumed by the next encoder stage) needs no
        # copy per sample: the replay hands the kept calls a placeholder of the right shape
        used = {tid for tid, c in follow.uses if c is None or not c.skipped()}
        used.update(id(t) for t in _tensors(out))
        for c in self._kept:
            c.needed = c.parent is None or any(id(t) in used for t in _tensors(c.output))
        self._plan = {}
        for m, cs in calls.items():
            run = [c for c in cs if not c.inside_kept()]
            if any(c.output is not None for c in run):
                self._plan[m] = run
        del roots
        self._drawn = sum(n for n, c in follow.draws if c is None or not c.skipped())  # what a replay draws
        self._drawn_all = sum(n for n, _ in follow.draws)  # what a plain replay draws
        total = sum(w for w, _ in follow.work)
        self.skipped_work = sum(w for w, c in follow.work if c is not None and c.skipped()) / max(total, 1)
        least = MIN_SHARED_WORK if self._min_shared_work is None else float(self._min_shared_work)
        self.plain = self.skipped_work < least
        # a network that writes into its input (``x.sub_(mean)``) left the traced input changed: the replays repeat the
        # input as the trace got it, not as it left it. A write is an operation seen writing into the input's storage
        # (before or after the pass: ``x.set_`` replaces it), or a changed version counter (an ATen overload such as
        # ``torch.ops.aten.sub_.Tensor`` writes without a name the trace recognises)
        wrote_input = (any(follow.written.get(s, 0) for s in {storage, _storage(x)})
                       or _version(x) != version)
        self._pristine = pristine if wrote_input else None
        del pristine
        # no reference cycles (a call's parent holds it in ``kept_below``): dropping this object frees the kept
        # outputs at once, not at the next garbage collection (a window's kept outputs would otherwise linger into
        # the next window's, more often the more samples, since each replay allocates Python objects)
        for cs in calls.values():
            for c in cs:
                c.parent = None
                c.kept_below = []
        for t in _tensors(out):
            if getattr(t, _FLAG, False):
                delattr(t, _FLAG)
        self.stochastic_bytes = follow.stochastic_bytes
        self._per_sample = follow.per_sample
        self._draws_checked = False
        # shared values handed on as expanded batch-1 values, operations on them run once per replay (the traced pass
        # wrote no stochastic value into a non-stochastic tensor, nor into its input); a batch of several inputs is
        # replayed one input at a time (its outputs batched like the input, so that they can be interleaved)
        self._constants = {id(t) for t in (*self.network.parameters(), *self.network.buffers())}
        self._rate_layers = _rate_in_layers(self.network)
        self._once = (not follow.stochastic_write and not wrote_input
                      and (batch == 1 or _batched(out, batch)))
        self.shared_bytes = sum(t.numel() * t.element_size() for c in self._kept for t in _tensors(c.output))
        self._needed_bytes = sum(t.numel() * t.element_size() for c in self._kept if c.needed
                                 for t in _tensors(c.output))
        self.copied_bytes = 0 if self._once else self._needed_bytes
        self.traced_bytes = self.shared_bytes + self.stochastic_bytes
        self.output_bytes = sum(t.numel() * t.element_size() for t in _tensors(out))
        if self.plain:  # every sample computes the kept outputs again (and nothing is kept for the replays)
            self.copied_bytes = self.shared_bytes
            self.shared_bytes = 0
            self._plan, self._kept = {}, []
        self._input = x
        return out

    def replay(self, predictor: Callable[[torch.Tensor], Any], x: torch.Tensor, k: int) -> Any:
        """Run ``k`` more samples at once on ``x`` (the traced input) repeated along the batch axis.

        Args:
            predictor: calls the network on its argument (as for :meth:`trace`).
            x: the traced input ``(B, C, *spatial)`` (checked: the traced tensor, or one equal to the input as the
                trace got it).
            k: samples in this batch (a Python or numpy integer ``>= 1``).

        Returns:
            The network output for the batch ``(k B, ...)``: sample ``s`` of input ``b`` is at ``s B + b``.

        Raises:
            SharingUnavailable: when ``x`` is not the traced input or the module calls do not follow the trace.
        """
        if self._input is None:
            raise RuntimeError("SharedPasses.replay called before trace")
        if not is_int(k) or k < 1:  # numpy integers too (found by hostile testing: numpy.int64(3) was refused)
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        k = int(k)
        # another tensor holding the input as the trace got it, before the traced pass wrote into it (found by hostile
        # testing: each replay of a flipped window, a new copy, was compared with the written input and refused)
        traced = self._input if self._pristine is None else self._pristine
        # a NaN equals itself here (torch.equal is False for a tensor holding one: the replay fell back to full passes)
        if x is not self._input and (x.shape != traced.shape
                                     or not (torch.equal(x, traced) or _same_bits(x, traced))):
            raise SharingUnavailable(
                "the input differs between the samples' calls (a test-time augmentation that draws on every call)"
            )
        if self._per_sample and k > 1:  # one sample at a time: sample s of input b at s B + b
            outs = []
            ops = 0
            for _ in range(k):
                outs.append(self.replay(predictor, x, 1))
                ops += self.shared_ops
            self.shared_ops = ops
            return _concat(outs)
        try:
            if self.plain:
                return self._replay_plain(predictor, x, k)
            if 1 < k == self._batch <= 3 and self._once and not self._draws_checked:
                # k samples of one input draw as much as the trace's B = k inputs, with or without a draw shared by
                # the samples, so their count cannot tell: the first such replay of a trace runs the whole batch
                # (k B rows: a count that tells, the kept values copied); later ones go input by input. From B = 4
                # on, the first input's samples run as 2 and k - 2 instead (see _replay_rows)
                return self._replay(predictor, x, k, None)
            return self._replay_batches(predictor, x, k)
        except _Unbatched:
            if k == 1:
                raise
        # a draw not made per batch element: the k samples would share it; one sample at a time from now on
        self._per_sample = True
        return self.replay(predictor, x, k)

    def _replay_plain(self, predictor: Callable[[torch.Tensor], Any], x: torch.Tensor, k: int) -> Any:
        """:meth:`replay` of ``k`` samples as one plain pass of the input repeated ``k`` times (:attr:`plain`).

        Only the draws are counted (while unchecked: one checked replay of ``k >= 2`` samples tells whether every
        draw is made per batch element; ``k = 1`` is one full pass, exact whatever the draws).
        """
        batch = self._batch
        count = k > 1 and not self._draws_checked
        draws = _Draws()
        with contextlib.ExitStack() as stack:
            stack.enter_context(_repeat_rates(self._rate_layers, batch, k))
            if count:
                stack.enter_context(draws)
            if self._pristine is not None:  # a fresh copy: the pass writes into it again
                out = predictor(_repeat(self._pristine, k))
            else:
                out = predictor(_repeat(x, k) if k > 1 else x)
        if count:
            if draws.drawn != self._drawn_all * k:
                raise _Unbatched(
                    f"the random draws of {k} samples of {batch} input(s) ({draws.drawn} values) are not {k} times "
                    f"those of the traced pass ({self._drawn_all}): a draw not made per batch element"
                )
            self._draws_checked = True
        self.shared_ops = 0
        return out

    def _replay_batches(self, predictor: Callable[[torch.Tensor], Any], x: torch.Tensor, k: int) -> Any:
        """:meth:`replay` of ``k`` samples at once."""
        if not self._once:
            return self._replay(predictor, x, k, None)
        if self._batch == 1:
            return self._replay(predictor, x, k, 0)
        if k == 1:
            return self._replay(predictor, x, k, None)
        return self._replay_rows(predictor, x, k)

    def _replay_rows(self, predictor: Callable[[torch.Tensor], Any], x: torch.Tensor, k: int) -> Any:
        """:meth:`replay` of ``k`` samples of a traced batch of several inputs, one input at a time."""
        # one input of the batch at a time: its shared values are batch-1 views of the batch's (no copy per sample,
        # operations on them run once), where a replay of the whole batch would copy them for every sample (an
        # expanded (k, B, ...) view is no (k B, ...) tensor); the trace stays batched (one pass of B inputs costs
        # less than B passes of one on the CPU)
        outs = []
        ops = 0
        for row in range(self._batch):
            if row == 0 and k == self._batch and not self._draws_checked:
                # k = B >= 4 samples of one input draw as much as the B traced inputs (see replay): the first input's
                # samples run as 2 and k - 2 (counts that tell, no call at batch 1, where PyTorch's CPU convolution
                # is slow); the whole batch with the kept values copied for every sample took 7 times the memory of
                # the same replay input by input and raised a call's peak 1.7-fold (BasicUNet's last stage, four
                # windows a batch, four samples)
                two = self._replay(predictor, x[:1], 2, row)
                ops += self.shared_ops
                outs.append(_concat([two, self._replay(predictor, x[:1], k - 2, row)]))
                del two
            else:
                outs.append(self._replay(predictor, x[row:row + 1], k, row))
            ops += self.shared_ops
        self.shared_ops = ops
        return _interleave(outs, k)

    def _replay(self, predictor: Callable[[torch.Tensor], Any], x: torch.Tensor, k: int, row: int | None) -> Any:
        """:meth:`replay` of the whole traced batch or of one of its inputs.

        ``row`` None: the whole batch, the kept outputs repeated per sample. Else input ``row`` alone (``x`` that
        input): the kept outputs' rows handed on as expanded views (see :class:`_Share`).
        """
        counters = dict.fromkeys(self._plan, 0)
        batch = self._batch
        rows = batch if row is None else 1

        def kept(out: Any) -> Any:
            if batch == 1:
                return out
            return tree_map(lambda t: t[row:row + 1] if isinstance(t, torch.Tensor) else t, out)

        def make(m: nn.Module, fwd: Callable) -> Callable:
            run = self._plan[m]

            def forward(*args: Any, **kwargs: Any) -> Any:
                i = counters[m]
                counters[m] = i + 1
                if i >= len(run):
                    raise SharingUnavailable(f"{type(m).__name__} is called more often than in the traced pass")
                call = run[i]
                if call.output is None:
                    return fwd(*args, **kwargs)
                if share is not None:
                    share.paused += 1
                try:
                    shape = _first_shape((args, kwargs))
                finally:
                    if share is not None:
                        share.paused -= 1
                want = call.input_shape
                if (shape is None) != (want is None) or (
                    shape is not None and (shape[1:] != want[1:] or shape[0] != k * rows)
                ):
                    raise SharingUnavailable(
                        f"{type(m).__name__} gets input of shape {shape}, traced with {want} (k = {k})"
                    )
                if share is not None:
                    return share.hand_out(kept(call.output))
                return _repeat(call.output, k) if call.needed else _placeholder(call.output, k)
            return forward

        share = _Share(k, self._constants) if row is not None else None
        draws = _Draws()
        with contextlib.ExitStack() as stack:
            stack.enter_context(_wrapped_forwards(list(self._plan), make))
            stack.enter_context(_repeat_rates(self._rate_layers, batch, k, row))
            if share is None:
                xs = _repeat(x if self._pristine is None else self._pristine, k)
            else:
                xs = share.hand_out(x)
                stack.enter_context(share)
            stack.enter_context(draws)
            out = predictor(xs)
        missing = [type(m).__name__ for m, i in counters.items() if i != len(self._plan[m])]
        if missing:
            raise SharingUnavailable(f"the module calls differ from the traced pass ({', '.join(missing[:3])})")
        if draws.drawn * batch != self._drawn * k * rows:
            raise _Unbatched(
                f"the random draws of {k} samples of {rows} input(s) ({draws.drawn} values) are not {k * rows} / "
                f"{batch} times those of the traced pass ({self._drawn}): a draw not made per batch element"
            )
        if k * rows != batch:  # a count that would have told a draw shared by the samples (see replay)
            self._draws_checked = True
        self.shared_ops = 0 if share is None else share.shared_ops
        if share is not None:  # a shared value in the output: plain copies, the caller's own
            out = tree_map(lambda t: t if share.base(t) is None else _repeat(share.base(t), k), out)
        return out


def replay_working_bytes(k: int, rows: int, stochastic: float, output: float, after: float = 0,
                         copied: float = 0, first_copies: float | None = None) -> int:
    """Working memory of a replay of ``k`` samples (:meth:`SharedPasses.replay_bytes`, :func:`estimate_memory`).

    One formula for the traced object and for the memory model (:func:`~monai_unc.inferers.estimate_memory`):

    - the whole batch at once (``rows = 1``): ``k (r + c + a)``, each sample's stochastic tensors ``r`` (its
      output among them), its copies of the kept values ``c`` and what the caller makes from its output ``a``;
    - a batch of ``rows = B > 1`` inputs one input at a time (``k >= 2``): per sample the largest of ``r / B + o (B -
      1) / B`` (one input's stochastic tensors beside the earlier inputs' outputs), ``2 o`` (the outputs and their
      interleaved copy) and ``o + a``; the first replay of ``k = B <= 3`` samples, while the draws are unchecked
      (``first_copies`` not None: the kept values that the stochastic rest reads), runs the whole batch with those
      copied, ``k (r + first_copies + a)``.

    Args:
        k: samples of the replay.
        rows: inputs replayed one at a time (1: the whole batch at once).
        stochastic: bytes of one sample's stochastic tensors ``r`` over the whole batch.
        output: bytes of one sample's output ``o`` over the whole batch.
        after: bytes per sample made from the output while it is alive (the probabilities).
        copied: bytes of kept values copied per sample by a replay of the whole batch.
        first_copies: the kept values a first replay of ``k = B <= 3`` copies per sample; None once the draws are
            checked (input by input).

    Returns:
        Bytes.

    Raises:
        ValueError: ``k`` or ``rows`` not an integer ``>= 1``, a bytes argument not a finite number ``>= 0``.
        TypeError: a bytes argument that is not a number (each named).

    Example:
        >>> from monai_unc.networks.shared import replay_working_bytes
        >>> replay_working_bytes(4, 1, 100, 10, after=10)  # the whole batch: 4 x (100 + 10)
        440
        >>> replay_working_bytes(4, 4, 100, 10, after=10)  # four inputs one at a time: 4 x max(25 + 7.5, 20, 20)
        130
    """
    # checked (found by hostile testing: k = 0 counted one sample, a NaN failed with int()'s unnamed ValueError)
    k, rows = check_integer(k, "k"), check_integer(rows, "rows")
    r, o, a = (check_nonnegative(v, name) for v, name in ((stochastic, "stochastic"), (output, "output"),
                                                          (after, "after")))
    copied = check_nonnegative(copied, "copied")
    if first_copies is not None:
        first_copies = check_nonnegative(first_copies, "first_copies")
    if k > 1 and rows > 1:
        if k == rows <= 3 and first_copies is not None:
            return math.ceil(k * (r + float(first_copies) + a))
        return math.ceil(k * max((r + o * (rows - 1)) / rows, 2 * o, o + a))
    return math.ceil(k * (r + float(copied) + a))


def auto_sample_batch(per_sample_bytes: int, case_bytes: int, remaining: int, traced_bytes: int = 0) -> int:
    """How many samples a replay batch holds when the inferer chooses (``sample_batch_size="auto"``).

    The batch needs at most the larger of :data:`AUTO_BATCH_FRACTION` of the case's stitched buffers
    (``case_bytes``) and what the traced first sample held (``traced_bytes``: its kept and stochastic tensors, a
    lower bound of one full pass's working memory, which the trace needs anyway), so the peak memory stays flat in
    the number of samples; at most :data:`MAX_SAMPLE_BATCH` and at most the samples left.

    Args:
        per_sample_bytes: what one more sample adds (:meth:`SharedPasses.per_sample_bytes`).
        case_bytes: bytes of the case's stitched output buffers.
        remaining: samples still to draw.
        traced_bytes: what the trace held (:attr:`SharedPasses.traced_bytes`: its kept and stochastic tensors).

    Returns:
        The batch size, ``>= 1``.

    Raises:
        TypeError / ValueError: a bytes argument that is not a finite number ``>= 0``, ``remaining`` that is not an
            integer ``>= 1`` (each named).

    Example:
        >>> from monai_unc.networks.shared import auto_sample_batch
        >>> auto_sample_batch(10, 1000, 29), auto_sample_batch(1000, 1000, 29), auto_sample_batch(1, 10**9, 5)
        (10, 1, 5)
        >>> auto_sample_batch(1000, 1000, 29, traced_bytes=4000)  # a replay batch no larger than the trace
        4
    """
    # checked (found by hostile testing: remaining=2.9 allowed 2 samples, True one, a NaN or an infinite budget
    # failed with int()'s unnamed errors)
    per = max(math.ceil(check_nonnegative(per_sample_bytes, "per_sample_bytes")), 1)
    case_bytes = check_nonnegative(case_bytes, "case_bytes")
    traced_bytes = check_nonnegative(traced_bytes, "traced_bytes")
    return _largest_batch(lambda k: k * per, case_bytes, check_integer(remaining, "remaining"), traced_bytes)


def _largest_batch(batch_bytes: Callable[[int], int], case_bytes: int, remaining: int, traced_bytes: int) -> int:
    """The largest ``k <= min(MAX_SAMPLE_BATCH, remaining)`` whose ``batch_bytes(k)`` fits the budget, else 1.

    The budget is :func:`auto_sample_batch`'s.
    """
    if remaining < 1:
        return 1
    budget = max(AUTO_BATCH_FRACTION * max(int(case_bytes), 0), max(int(traced_bytes), 0))
    k = int(min(MAX_SAMPLE_BATCH, remaining))
    while k > 1 and batch_bytes(k) > budget:
        k -= 1
    return k


def sample_batch(passes: SharedPasses, setting: int | str, case_voxels: int, classes: int, remaining: int) -> int:
    """Samples of the next replay batch of a traced window: the inferers' ``sample_batch_size`` setting applied.

    A fixed ``setting`` is used as is (at most the samples left); ``"auto"`` is the largest batch within the budget
    of :func:`auto_sample_batch` (the traced window's bytes and the case's stitched buffers: ``case_voxels * 4 *
    (classes + 4)`` bytes, float32 mean probabilities and the entropy, second-moment, window-entropy and weight
    maps) for the replay that the trace will make (:meth:`SharedPasses.replay_bytes`), with each sample's
    probabilities (``classes`` channels over the traced window's voxels, in the dtype that
    :func:`~monai_unc.measures.entropy_dtype` gives the input's: float32 for a half-precision input) made from its
    output.

    Args:
        passes: the traced window (:meth:`SharedPasses.trace` ran).
        setting: ``"auto"`` or an integer ``>= 1``.
        case_voxels: voxels of the case (spatial size, one channel).
        classes: output channels of the network.
        remaining: samples still to draw.

    Returns:
        The batch size, ``>= 1``.

    Raises:
        ValueError: when ``setting`` is neither ``"auto"`` nor an integer ``>= 1``, or ``case_voxels``,
            ``classes`` or ``remaining`` is not an integer (``>= 0``, ``>= 1``, ``>= 1``; a bool is not one).
        TypeError: when ``passes`` is not a :class:`SharedPasses`.

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import SharedPasses, sample_batch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Dropout2d(0.5),
        ...                           torch.nn.Conv2d(4, 2, 1))
        >>> passes = SharedPasses(net)
        >>> _ = passes.trace(net, torch.rand(1, 1, 8, 8))
        >>> sample_batch(passes, 4, 64, 2, 29), sample_batch(passes, 4, 64, 2, 3)
        (4, 3)
        >>> sample_batch(passes, "auto", 64, 2, 29) >= 1
        True
    """
    if not isinstance(passes, SharedPasses):
        raise TypeError(f"passes must be a SharedPasses, got {type(passes).__name__}")
    # checked (found by hostile testing: classes=True counted one class, remaining=0 or -1 allowed one sample)
    case_voxels = check_integer(case_voxels, "case_voxels", 0)
    classes = check_integer(classes, "classes")
    remaining = check_integer(remaining, "remaining")
    return _sample_batch(passes.per_sample_bytes(), passes.replay_bytes, passes.traced_bytes, passes._input, setting,
                         case_voxels, classes, remaining)


def _sample_batch(per_sample_bytes: int, replay_bytes: Callable[[int, int], int], traced_bytes: int,
                  x: torch.Tensor | None, setting: int | str, case_voxels: int, classes: int, remaining: int) -> int:
    """:func:`sample_batch` from a trace's terms: ``replay_bytes(k, probabilities a sample)``, bytes, input."""
    setting = check_sample_batch_size(setting, "setting (sample_batch_size)")
    if setting != "auto":
        return max(1, min(int(setting), remaining))
    case_bytes = max(int(case_voxels), 0) * 4 * (max(int(classes), 1) + 4)
    # each sample's probabilities too: the replay batch's outputs become k samples' probabilities at once (found by
    # hostile testing: without them a batch of 20 samples of 64 classes took 1.7x the budget it was sized to)
    probabilities = 0
    if x is not None and x.ndim >= 2:
        # in the evaluation dtype (found by hostile testing: a float16 window's float32 probabilities were counted at
        # 2 bytes, and the automatic batch took 1.44x its budget)
        size = entropy_dtype(x.dtype).itemsize if x.is_floating_point() else 4
        probabilities = x.numel() // max(int(x.shape[1]), 1) * max(int(classes), 1) * size
    if x is not None and x.device.type == "cpu":
        # on the CPU a replay batch is sized as if each sample replayed the whole window batch (the rule before
        # replay_bytes): a replay input by input needs less memory, but larger batches measured slower there
        # (BasicUNet 32-256, last stage, two windows a batch: 1.29x one stock pass with 2 samples a replay, 1.41x
        # with 5, 1.44x with 8, benchmarks/README; their intermediates leave the caches), and a CPU saves little
        # per call, where a GPU's host saves launches. Never less than the replay needs: the first replay of k = B
        # <= 3 samples runs the whole batch with the kept values copied (found by hostile testing: two and three
        # windows a batch replayed k = B samples in 1.67x and 1.71x the budget)
        per = per_sample_bytes + probabilities
        return _largest_batch(lambda k: max(k * per, replay_bytes(k, probabilities)), case_bytes, remaining,
                              traced_bytes)
    return _largest_batch(lambda k: replay_bytes(k, probabilities), case_bytes, remaining, traced_bytes)


#: the types of the module attributes a key holds (plain settings: strides, kernel sizes, scale factors, flags), and
#: tuples of them
_PLAIN_SETTINGS = frozenset({bool, int, float, str, type(None)})


def _module_state(m: nn.Module) -> tuple:
    """What of a module decides a trace's outcome: identity, type, hooks, parameters, plain settings.

    The identity, the parameters' shapes and the plain settings (attributes of the types in ``_PLAIN_SETTINGS`` or
    tuples of them: mode, dropout probability, stride, kernel size, scale factor; in the order the module set them;
    a tuple holding anything else, a tensor say, is left out, so a key keeps no tensor alive) were found by
    hostile testing: a submodule swapped for one of the same type with other channels, or ``Upsample.scale_factor``
    or a pooling's ``kernel_size`` and ``stride`` set anew, changed a trace's memory terms and not its key, so a
    remembered verdict forced full passes where a trace replays several samples at once (other seeded maps).
    """
    d = m.__dict__  # its plain settings hold the mode and a dropout's probability
    return (id(m), type(m), tuple(m._forward_hooks), tuple(m._forward_pre_hooks),
            tuple([(t.shape, t.dtype) for t in m._parameters.values() if t is not None]),
            tuple([v for v in d.values() if type(v) in _PLAIN_SETTINGS
                   or (type(v) is tuple and all(type(e) in _PLAIN_SETTINGS for e in v))]))


def _autocast_state(device_type: str) -> tuple:
    try:
        on = torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: the CUDA flag only
        on = torch.is_autocast_enabled() if device_type == "cuda" else False
    if not on:
        return (False, None)
    try:
        return (True, torch.get_autocast_dtype(device_type))
    except (AttributeError, TypeError):
        return (True, None)


class PlainTraces:
    """Which networks replay plainly on which inputs: their next windows skip the trace and run full passes.

    A trace costs more than a pass (every operation is followed in Python: 7.5 ms against 3.5 ms for one synchronised
    pass of the example UNet at 96^3 on an H200, where the host is what limits a small network). When a trace finds
    too little to share (:attr:`SharedPasses.plain`) and the sample batch is one sample, each later sample is one full
    pass of the network, so the trace bought nothing. :meth:`remember` keeps that verdict, with the trace's memory
    terms, for the network (weakly: the network is not kept alive) and a key of the input's shape, dtype and device,
    the autocast and grad modes, the network's other arguments, and every module's identity, type, mode, dropout
    probability, hooks, parameter shapes and plain settings (numbers, strings and tuples of them: strides, kernel
    sizes, scale factors); :meth:`full_passes` answers whether a window like ``x`` (same key) would again replay one
    sample at a time, so that its samples can run as full passes without the trace. Full passes are exact whatever
    the network does, so the verdict decides speed and, for one seed, the draws equal the trace path's: a network
    whose calls depend on its input's values may share more (or batch several samples) on another input of the same
    key, and loses only that (the same draws, other roundings). Not kept: a traced pass that wrote into its input
    (its replays start from a copy taken before), a key that cannot be hashed. At most :attr:`max_keys` keys per
    network (the oldest go first).

    Example:
        >>> import torch
        >>> from monai_unc.networks.shared import PlainTraces, SharedPasses
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.Dropout(0.5), torch.nn.Conv2d(2, 16, 3),
        ...                           torch.nn.Conv2d(16, 2, 3))
        >>> x = torch.rand(1, 1, 8, 8)
        >>> passes = SharedPasses(net)
        >>> _ = passes.trace(net, x)
        >>> traces = PlainTraces()
        >>> traces.remember(net, x, passes, classes=2)
        >>> passes.plain, traces.full_passes(net, x, 1, 64, 29), traces.full_passes(net, x.double(), 1, 64, 29)
        (True, True, False)
    """

    max_keys = 64

    def __init__(self) -> None:
        self._verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def clear(self) -> None:
        """Forget every verdict."""
        self._verdicts = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        """How many verdicts are kept (over every network still alive)."""
        return sum(len(keys) for keys in list(self._verdicts.values()))

    @staticmethod
    def _key(network: nn.Module, x: torch.Tensor, extra: Any = ()) -> tuple:
        return (tuple(x.shape), x.dtype, x.device, _autocast_state(x.device.type), torch.is_grad_enabled(),
                tuple(_module_state(m) for m in network.modules()), extra)

    def remember(self, network: nn.Module, x: torch.Tensor, passes: SharedPasses, classes: int,
                 extra: Any = ()) -> None:
        """Keep the verdict of ``passes`` (traced on ``x``) when its replays are plain and leave the input as it was.

        Args:
            network: the traced network (the key's modules; held weakly).
            x: the window as the caller holds it (before any test-time augmentation the predictor applies).
            passes: the window's traced :class:`SharedPasses`.
            classes: output channels of the network (its probabilities' channels, for the sample batch).
            extra: anything else that decides the network's calls, part of the key (the network's other arguments:
                positional and keyword); an unhashable one keeps no verdict.
        """
        if not passes.traced or not passes.plain or passes.wrote_input:
            return
        key = self._key(network, x, extra)
        try:
            hash(key)
        except TypeError:  # an unhashable network argument (``extra``): no verdict kept
            return
        keys = self._verdicts.get(network)
        if keys is None:
            keys = self._verdicts[network] = OrderedDict()
        keys[key] = (passes.per_sample_bytes(), passes.traced_bytes, int(classes))
        while len(keys) > self.max_keys:
            keys.popitem(last=False)

    def full_passes(self, network: nn.Module, x: torch.Tensor, setting: int | str, case_voxels: int,
                    remaining: int, extra: Any = ()) -> bool:
        """Whether the samples of a window like ``x`` would replay one at a time as plain passes (see the class).

        The answer is the sample batch that a trace of the window would choose (:func:`sample_batch` with the
        remembered trace's memory terms and output channels), so a seeded run draws the same masks with and without
        a remembered verdict.

        Args:
            network: the network.
            x: the window.
            setting: the ``sample_batch_size`` setting (``"auto"`` or an integer).
            case_voxels: voxels of the case (one channel), for the automatic sample batch.
            remaining: samples after the first.
            extra: as for :meth:`remember`.

        Returns:
            True when a remembered trace of this network on a window of the same key was plain and the sample batch
            is one sample for the rest; False otherwise (trace the window).
        """
        keys = self._verdicts.get(network)
        if not keys:
            return False
        try:
            terms = keys.get(self._key(network, x, extra))
        except TypeError:  # unhashable (see remember)
            return False
        if terms is None:
            return False
        per = terms[0]  # a plain replay: the whole batch repeated, linear in the samples
        return _sample_batch(per, lambda k, after: k * (per + after), terms[1], x, setting, case_voxels, terms[2],
                             max(int(remaining), 1)) == 1


#: the process's verdicts (:class:`PlainTraces`), kept by the MONAI inferers
PLAIN_TRACES = PlainTraces()
