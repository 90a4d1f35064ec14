// strata's GGUF writer read by Hugging Face's parser (@huggingface/gguf, package.json): the files
// tests/io/gguf_sample_writer.cpp writes must come out with the tensor names, ggml types, shapes
// (ggml order: ne[0] innermost) and metadata values and types that strata meant (a long text in
// 1 MiB pieces among them, as `strata quantize` writes tokenizer.json), and a gguf-split
// set must be found and read whole by ggufAllShards. Expected values are written out here again,
// independently of the C++ side.
// Usage: node gguf_hf_test.mjs DIR   (DIR holds sample.gguf and split-0000{1,2}-of-00002.gguf)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { gguf, ggufAllShards, GGMLQuantizationType, GGUFValueType } from '@huggingface/gguf';

const [dir] = process.argv.slice(2);
assert.ok(dir, 'usage: node gguf_hf_test.mjs DIR');

// [name, ggml type, ne (innermost first)]: strata shapes [3, 8], [4, 64], [2, 3, 256], [2, 512], [8].
const tensors = [
  ['token_embd.weight', GGMLQuantizationType.F32, [8n, 3n]],
  ['blk.0.attn_q_a.weight', GGMLQuantizationType.Q8_0, [64n, 4n]],
  ['blk.0.ffn_gate_exps.weight', GGMLQuantizationType.Q4_K, [256n, 3n, 2n]],
  ['blk.1.ffn_down_exps.weight', GGMLQuantizationType.Q2_K, [512n, 2n]],
  ['output_norm.weight', GGMLQuantizationType.F32, [8n]],
  // Routed experts as ggml MXFP4 (`strata quantize --experts mxfp4`): [n_experts, out, in] = [2, 3, 64].
  ['blk.1.ffn_up_exps.weight', GGMLQuantizationType.MXFP4, [64n, 3n, 2n]],
];
// Bytes per tensor (ggml block sizes), padded to the file's alignment of 64.
const nbytes = [3 * 8 * 4, 4 * 2 * 34, 2 * 3 * 144, 2 * 2 * 84, 8 * 4, 2 * 3 * 2 * 17];

test('ids of the ggml types match strata (io/gguf.h GgmlType)', () => {
  assert.equal(GGMLQuantizationType.F32, 0);
  assert.equal(GGMLQuantizationType.Q8_0, 8);
  assert.equal(GGMLQuantizationType.Q2_K, 10);
  assert.equal(GGMLQuantizationType.Q4_K, 12);
  assert.equal(GGMLQuantizationType.MXFP4, 39);
});

test('tensor names, types, shapes and offsets', async () => {
  const r = await gguf(`${dir}/sample.gguf`, { allowLocalFile: true });
  assert.equal(r.littleEndian, true);
  assert.equal(r.metadata.version, 3);
  assert.equal(r.metadata.tensor_count, BigInt(tensors.length));
  assert.equal(r.tensorInfos.length, tensors.length);
  assert.equal(r.tensorDataOffset % 64n, 0n, 'data section aligned to general.alignment');
  let off = 0n;
  tensors.forEach(([name, type, ne], i) => {
    const t = r.tensorInfos[i];
    assert.equal(t.name, name);
    assert.equal(t.dtype, type, `${name}: type`);
    assert.equal(t.n_dims, ne.length, `${name}: n_dims`);
    assert.deepEqual(t.shape, ne, `${name}: shape`);
    assert.equal(t.offset, off, `${name}: offset`);
    off += BigInt(Math.ceil(nbytes[i] / 64) * 64);
  });
});

// The MXFP4 expert tensor's first block, from the file: ggml block_mxfp4 {e, qs[16]} with value j
// in the low nibble of qs[j] and value j + 16 in its high nibble, made from the official codes the
// writer packed (byte i = i * 7, value 2i in its low nibble) and scale 120.
test('MXFP4 experts are ggml blocks of the official codes', async () => {
  const { readFileSync } = await import('node:fs');
  const r = await gguf(`${dir}/sample.gguf`, { allowLocalFile: true });
  const t = r.tensorInfos.find((x) => x.name === 'blk.1.ffn_up_exps.weight');
  const at = Number(r.tensorDataOffset + t.offset);
  const block = readFileSync(`${dir}/sample.gguf`).subarray(at, at + 17);
  const official = Array.from({ length: 16 }, (_, i) => (i * 7) & 255);
  const value = (k) => (official[k >> 1] >> ((k & 1) * 4)) & 15;
  const want = [120, ...Array.from({ length: 16 }, (_, j) => value(j) | (value(j + 16) << 4))];
  assert.deepEqual(Array.from(block), want);
});

test('metadata values and types', async () => {
  const r = await gguf(`${dir}/sample.gguf`, { allowLocalFile: true, typedMetadata: true });
  const m = r.typedMetadata;
  const want = {
    'general.architecture': [GGUFValueType.STRING, 'deepseek41'],
    'general.name': [GGUFValueType.STRING, 'strata gguf sample'],
    'general.alignment': [GGUFValueType.UINT32, 64],
    'deepseek41.block_count': [GGUFValueType.UINT32, 2],
    'deepseek41.embedding_length': [GGUFValueType.UINT64, 4096n],
    'sample.i8': [GGUFValueType.INT8, -7],
    'sample.u16': [GGUFValueType.UINT16, 65535],
    'sample.i32': [GGUFValueType.INT32, -123456],
    'sample.i64': [GGUFValueType.INT64, -9000000000n],
    'sample.f32': [GGUFValueType.FLOAT32, 0.5],
    'sample.f64': [GGUFValueType.FLOAT64, -2.25],
    'sample.bool': [GGUFValueType.BOOL, true],
    'sample.u8': [GGUFValueType.UINT8, 200],
    'sample.i16': [GGUFValueType.INT16, -300],
    'sample.u64': [GGUFValueType.UINT64, 1n << 40n],
    'sample.arr_i32': [GGUFValueType.ARRAY, [1, -2, 3]],
    'sample.arr_f32': [GGUFValueType.ARRAY, [0.25, 1.5]],
    'tokenizer.ggml.tokens': [GGUFValueType.ARRAY, ['<｜begin▁of▁sentence｜>', 'a', 'b c']],
  };
  for (const [key, [type, value]] of Object.entries(want)) {
    assert.ok(key in m, `${key} present`);
    assert.equal(m[key].type, type, `${key}: type`);
    assert.deepEqual(m[key].value, value, `${key}: value`);
  }
  assert.equal(m['sample.arr_i32'].subType, GGUFValueType.INT32);
  assert.equal(m['sample.arr_f32'].subType, GGUFValueType.FLOAT32);
  assert.equal(m['tokenizer.ggml.tokens'].subType, GGUFValueType.STRING);
  // A long text in pieces of at most 1 MiB, each whole characters, that join to the text.
  const text = m['strata.tokenizer_json'];
  assert.equal(text.type, GGUFValueType.ARRAY);
  assert.equal(text.subType, GGUFValueType.STRING);
  assert.ok(text.value.length >= 5, `${text.value.length} pieces`);
  for (const p of text.value) assert.ok(Buffer.byteLength(p) <= 1 << 20 && !p.includes('\uFFFD'));
  assert.equal(text.value.join(''), 'a' + '\u00e9'.repeat(2500000));
  assert.equal(r.metadata.kv_count, BigInt(Object.keys(want).length + 1));
});

test('a gguf-split set is read whole', async () => {
  const r = await ggufAllShards(`${dir}/split-00001-of-00002.gguf`, { allowLocalFile: true });
  assert.equal(r.shards.length, 2);
  assert.deepEqual(r.shards.map((s) => s.tensorInfos.map((t) => t.name)),
    [['token_embd.weight', 'blk.0.attn_q_a.weight'], ['blk.1.ffn_down_exps.weight']]);
  assert.equal(r.shards[0].metadata['split.count'], 2);
  assert.equal(r.shards[1].metadata['split.no'], 1);
  assert.equal(r.shards[1].metadata['split.tensors.count'], 3);
  assert.equal(r.parameterCount, 3 * 8 + 4 * 64 + 2 * 512);
});
