"""Raw CTR rows as the model's input batches: the Arrow schema tf.Transform's TFXIO
reads (every model column as a list: scalars one-element lists, multi-valued columns
variable-length lists), the conversion of parsed rows into it, and the tensor adapter
config that says which columns are dense and which sparse. Preprocessing
(`beam_jobs.preprocess_ctr`) builds every batch it analyses and transforms with these.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from components.ctr.rawformat import RawLayout, default_layout


_MODEL_VALUE_TYPE = {"str": pa.large_binary(), "int": pa.int64(), "float": pa.float32(),
                     "str_list": pa.large_binary()}


def arrow_schema(layout: RawLayout | None = None) -> pa.Schema:
    """The model's raw columns (all but the example id) as lists: scalars as one-element
    lists (TFXIO's dense adapter), multi-valued columns as variable-length lists."""
    layout = layout or default_layout()
    return pa.schema([(k, pa.large_list(_MODEL_VALUE_TYPE[kind])) for k, kind in layout.columns
                      if k != layout.example_id])


def _select(batch: pa.RecordBatch, mask: np.ndarray, n: int,
            schema: pa.Schema) -> pa.RecordBatch:
    """The rows of `mask` (`n` of them), of the columns the model batch (`schema`) takes:
    the id and timestamp are never copied. Applied to the flat parsed columns, before they
    become one-element lists: filtering the list columns took twice as long."""
    batch = batch.select(schema.names)
    return batch if n == batch.num_rows else batch.filter(pa.array(mask))


def to_model_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Raw rows -> the list columns tf.Transform's TFXIO adapter reads (scalars wrapped in
    one-element lists; multi-valued columns as they are, a null as an empty list)."""
    offsets = pa.array(np.arange(batch.num_rows + 1, dtype=np.int64))
    arrays = []
    for field in schema:
        col = batch.column(field.name)
        value_type = field.type.value_type
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = col.cast(pa.large_list(pa.large_string()))
            if col.null_count:
                col = pc.if_else(col.is_null(), pa.scalar([], col.type), col)
            arrays.append(col.cast(field.type))
            continue
        if pa.types.is_floating(value_type):
            col = col.cast(value_type).fill_null(float("nan"))
        else:
            col = col.cast(value_type)
        arrays.append(pa.LargeListArray.from_arrays(offsets, col))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def tensor_adapter_config(layout: RawLayout | None = None):
    """Scalar columns as dense tensors, multi-valued ones as SparseTensors (VarLen)."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.public import tfxio
    layout = layout or default_layout()
    kinds = layout.kinds
    schema = arrow_schema(layout)
    reps = {}
    for field in schema:
        rep = schema_pb2.TensorRepresentation()
        if kinds[field.name] == "str_list":
            rep.varlen_sparse_tensor.column_name = field.name
        else:
            rep.dense_tensor.column_name = field.name
            rep.dense_tensor.shape.CopyFrom(schema_pb2.FixedShape())
        reps[field.name] = rep
    return tfxio.TensorAdapterConfig(schema, reps)
