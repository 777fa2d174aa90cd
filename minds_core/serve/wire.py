"""The protobuf bodies of the Tinker API: forward/backward requests in, loss and sample results out.

The SDK sends ``/api/v1/forward_backward`` as a ``tinker_public.ForwardBackwardRequest``
(optionally zstd-compressed: ``encodings`` undoes that first) and asks for ``ForwardBackwardOutput`` and ``SampleResponse``
results as protobuf (``Accept: application/x-protobuf``); every other body is JSON.
These functions are the server-side inverses of the SDK's ``tinker.proto`` converters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.types.topk_logprobs import TopkLogprobs

from minds_core.http.errors import BadRequest
from minds_core.http.limits import ServeLimits

__all__ = ["PROTO_CONTENT_TYPE", "decode_forward_backward", "encode_forward_backward", "encode_sample", "parse_forward_backward"]

PROTO_CONTENT_TYPE = "application/x-protobuf"

_DTYPES: dict[int, tuple[np.dtype[Any], types.TensorDtype]] = {
    pb.DTYPE_FLOAT32: (np.dtype(np.float32), "float32"),
    pb.DTYPE_INT64: (np.dtype(np.int64), "int64"),
    pb.DTYPE_INT32: (np.dtype(np.int32), "int64"),
}
_STOP_REASONS = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


def parse_forward_backward(body: bytes) -> pb.ForwardBackwardRequest:
    """The SDK's protobuf body (its Content-Encoding undone by ``encodings``) as a message, nothing checked yet."""
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise BadRequest(f"The forward_backward body is not a tinker_public.ForwardBackwardRequest: {exc}") from None
    return message


def decode_forward_backward(
    body: bytes | pb.ForwardBackwardRequest, limits: ServeLimits
) -> tuple[types.ForwardBackwardRequest, bool]:
    """The request and its ``forward_only`` flag, from the SDK's protobuf body (or its parsed message); tensors
    checked against ``limits``."""
    message = body if isinstance(body, pb.ForwardBackwardRequest) else parse_forward_backward(body)
    _check_size(message, limits)
    config: dict[str, float | str] = {key: value for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[_datum(datum, limits) for datum in message.data],
            loss_fn=message.loss_fn,
            loss_fn_config=config or None,
        ),
        model_id=message.model_id,
        seq_id=message.seq_id,
    )
    return request, message.forward_only


def _check_size(message: pb.ForwardBackwardRequest, limits: ServeLimits) -> None:
    """Count the request's tokens and tensor elements from its bytes, before any of them becomes a Python number."""
    tokens = elements = 0
    for datum in message.data:
        tokens += sum(len(chunk.encoded_text.tokens) // 4 for chunk in datum.model_input)
        for tensor in datum.loss_fn_inputs.values():
            if tensor.WhichOneof("encoding") == "sparse_csr":
                csr = tensor.sparse_csr
                elements += len(csr.values) // 4 + (len(csr.crow_indices) + len(csr.col_indices)) // 8
            else:
                elements += len(tensor.dense) // 8 if tensor.dtype == pb.DTYPE_INT64 else len(tensor.dense) // 4
    limits.check_batch(len(message.data), tokens, elements)


def _datum(message: pb.Datum, limits: ServeLimits) -> types.Datum:
    chunks = []
    for chunk in message.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise BadRequest(f"Model input chunks of kind {kind!r} are not supported by minds serve (only token chunks)")
        tokens = np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32)
        chunks.append(types.EncodedTextChunk(tokens=tokens.tolist()))
    inputs = {name: _tensor(tensor, name, limits) for name, tensor in message.loss_fn_inputs.items()}
    if not message.model_input_spans and not message.loss_fn_input_spans:
        return types.Datum(model_input=types.ModelInput(chunks=chunks), loss_fn_inputs=inputs)
    return types.Datum(
        model_input=types.ModelInput(chunks=chunks),
        loss_fn_inputs=inputs,
        model_input_spans=[_span(span) for span in message.model_input_spans],
        loss_fn_input_spans=[_span(span) for span in message.loss_fn_input_spans],
    )


def _span(message: pb.ProvenanceSpan) -> types.PromptProvenanceSpan | types.SampledProvenanceSpan:
    """A datum's provenance run (the SDK's ``Datum.with_provenance``)."""
    kind = message.WhichOneof("span")
    arm = message.sampled_tokens if kind == "sampled_tokens" else message.prompt_tokens
    span_type = types.SampledProvenanceSpan if kind == "sampled_tokens" else types.PromptProvenanceSpan
    try:
        return span_type(sequence_id=arm.sequence_id, offset=arm.offset, length=arm.length)
    except ValueError as exc:
        raise BadRequest(f"A provenance span is invalid: {exc}") from None


def _tensor(message: pb.Tensor, name: str, limits: ServeLimits) -> types.TensorData:
    if message.dtype not in _DTYPES:
        raise BadRequest(f"Tensor dtype {message.dtype} is not supported (float32 and int64 are)")
    np_dtype, dtype = _DTYPES[message.dtype]
    shape = list(message.shape) or None
    limits.check_shape(f"loss_fn_inputs[{name!r}]", shape)
    if message.WhichOneof("encoding") == "sparse_csr":
        csr = message.sparse_csr
        return types.TensorData(
            data=np.frombuffer(csr.values, dtype=np_dtype).copy(),
            dtype=dtype,
            shape=shape,
            sparse_crow_indices=np.frombuffer(csr.crow_indices, dtype=np.int64).tolist(),
            sparse_col_indices=np.frombuffer(csr.col_indices, dtype=np.int64).tolist(),
        )
    return types.TensorData(data=np.frombuffer(message.dense, dtype=np_dtype).copy(), dtype=dtype, shape=shape)


def _tensor_message(tensor: types.TensorData) -> pb.Tensor:
    """``tensor`` as a ``tinker_public.Tensor``: dense, or sparse CSR when it is sparse."""
    numpy_dtype = np.int64 if tensor.dtype == "int64" else np.float32
    message = pb.Tensor(dtype=pb.DTYPE_INT64 if tensor.dtype == "int64" else pb.DTYPE_FLOAT32)
    if tensor.sparse_crow_indices is not None and tensor.sparse_col_indices is not None and tensor.shape is not None:
        message.shape.extend(tensor.shape)
        message.sparse_csr.CopyFrom(
            pb.SparseCsr(
                values=np.asarray(tensor.data, dtype=numpy_dtype).tobytes(),
                crow_indices=np.asarray(tensor.sparse_crow_indices, dtype=np.int64).tobytes(),
                col_indices=np.asarray(tensor.sparse_col_indices, dtype=np.int64).tobytes(),
            )
        )
        return message
    array = np.asarray(tensor.to_numpy())
    message.shape.extend(tensor.shape if tensor.shape is not None else list(array.shape))
    message.dense = array.astype(numpy_dtype).tobytes()
    return message


def encode_forward_backward(output: types.ForwardBackwardOutput) -> bytes:
    """``output`` as a ``tinker_public.ForwardBackwardOutput``: one batched record of every field."""
    message = pb.ForwardBackwardOutput(loss_fn_output_type=output.loss_fn_output_type or "ArrayRecord")
    for key, value in output.metrics.items():
        message.metrics[key] = float(value)
    if output.loss_fn_outputs:
        record = message.loss_fn_outputs.add(num_datums=len(output.loss_fn_outputs))
        for name in output.loss_fn_outputs[0]:
            arrays = [np.asarray(item[name].to_numpy()) for item in output.loss_fn_outputs]
            integer = output.loss_fn_outputs[0][name].dtype == "int64"
            arrays = [array.astype(np.int64 if integer else np.float32) for array in arrays]
            offsets = np.cumsum([0, *(array.nbytes for array in arrays)], dtype=np.int64)
            record.fields[name].CopyFrom(
                pb.BatchedTensor(
                    data=b"".join(array.tobytes() for array in arrays),
                    offsets=offsets.tobytes(),
                    dtype=pb.DTYPE_INT64 if integer else pb.DTYPE_FLOAT32,
                    trailing_shape=list(arrays[0].shape[1:]),
                )
            )
    return message.SerializeToString()


def _floats(values: Any) -> bytes:
    return np.asarray([np.nan if value is None else value for value in values], dtype=np.float32).tobytes()


def _topk(topk: TopkLogprobs | None) -> pb.TopkLogprobs | None:
    """The SDK's dense top-k matrices (empty positions already hold its sentinel) as a ``TopkLogprobs`` message."""
    if topk is None or topk.token_ids.size == 0:
        return None
    length, k = topk.token_ids.shape
    return pb.TopkLogprobs(
        token_ids=np.ascontiguousarray(topk.token_ids, dtype=np.int32).tobytes(),
        logprobs=np.ascontiguousarray(topk.logprobs, dtype=np.float32).tobytes(),
        k=k,
        length=length,
    )


def encode_sample(response: types.SampleResponse) -> bytes:
    """``response`` as a ``tinker_public.SampleResponse``."""
    message = pb.SampleResponse()
    for sequence in response.sequences:
        item = message.sequences.add(
            stop_reason=_STOP_REASONS[sequence.stop_reason],
            tokens=np.asarray(sequence.tokens, dtype=np.int32).tobytes(),
        )
        if sequence.logprobs is not None:
            item.logprobs = _floats(sequence.logprobs)
        topk = _topk(sequence.topk_logprobs_np)
        if topk is not None:
            item.topk_sampled_logprobs.CopyFrom(topk)
    if response.prompt_logprobs is not None:
        message.prompt_logprobs = _floats(response.prompt_logprobs)
    topk = _topk(response.topk_prompt_logprobs_np)
    if topk is not None:
        message.topk_prompt_logprobs.CopyFrom(topk)
    if response.target_prompt_logprobs is not None:
        message.target_prompt_logprobs.CopyFrom(_tensor_message(response.target_prompt_logprobs))
    return message.SerializeToString()
