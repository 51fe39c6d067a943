"""Gradient compression for allreduce (Horovod's hvd.Compression).

A compressor turns a tensor into what travels and back:
    compressed, ctx = compressor.compress(tensor)
    ...reduce `compressed` over the ranks...
    result = compressor.decompress(reduced, ctx)
ctx is whatever decompress() needs (here: the original dtype).
"""

import torch


class Compressor:
    """Interface of a compression algorithm (static methods, as Horovod's)."""

    @staticmethod
    def compress(tensor):
        """Returns (compressed tensor, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends the tensor as it is (the default)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Sends floating point tensors as `wire_dtype`; other dtypes as they are."""

    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if tensor.dtype == ctx else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Sends floating point tensors as float16 (half the bytes of float32)."""

    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Sends floating point tensors as bfloat16 (float32's range, 8 bits of mantissa)."""

    wire_dtype = torch.bfloat16


class Compression:
    """The compression algorithms: Compression.none (default), .fp16, and cohort's .bf16."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
