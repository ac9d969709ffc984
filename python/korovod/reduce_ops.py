"""Horovod's reduction op constants (hvd.Average, hvd.Sum, ...) and its rule for the deprecated
`average` argument, shared by korovod's framework bindings."""
import warnings

from korovod.session import _client

Average = _client.AVERAGE
Sum = _client.SUM
Min = _client.MIN
Max = _client.MAX
Product = _client.PRODUCT
# A real op constant, as in Horovod. Adasum runs in the bindings (a pairwise tree over an
# allgather): the engine itself reduces with Sum, Average, Min, Max and Product.
Adasum = max(Sum, Average, Min, Max, Product) + 1


def check_op(op):
    if op not in (Sum, Average, Min, Max, Product, Adasum):
        raise ValueError("korovod: unknown reduction op %r" % (op,))
    return op


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule: `average` is the deprecated spelling of op=Average/Sum; giving both is an
    error; neither means Average."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of "
                             "them.")
    elif average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning)
        op = Average if average else Sum
    else:
        op = Average
    return check_op(op)
