// The official OpenAI Node SDK (npm `openai`, pinned in package.json) against `lumen serve`
// on the tiny shared stories260K model (issue 17, acceptance 3): models.list / models.retrieve, chat and
// completions (whole and streaming), response_format json_schema, embeddings.create (the SDK
// asks for base64 and decodes it), errors as the SDK's typed exceptions, and the tool
// calling round trip with streamed tool_call deltas.
//
// Run by ctest (OpenAiNodeSdk): node tests/tools/openai_sdk_test.mjs, with LUMEN_BIN and
// LUMEN_SHARED set. Exits 77 (ctest: skipped) with a message when the SDK is not installed
// (scripts/setup.sh runs `npm ci` in tests/tools).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
let OpenAI;
try {
  require.resolve('openai', { paths: [here] });
  OpenAI = (await import('openai')).default;
} catch {
  console.log('SKIP: the OpenAI Node SDK is not installed in tests/tools/node_modules (run scripts/setup.sh, or npm ci in tests/tools)');
  process.exit(77);
}

const bin = process.env.LUMEN_BIN;
const shared = process.env.LUMEN_SHARED;
if (!bin || !shared) {
  console.error('LUMEN_BIN and LUMEN_SHARED must be set');
  process.exit(2);
}
// stories260K: its vocabulary has byte tokens, so a JSON grammar can always continue.
const modelPath = `${shared}/models/stories260K/stories260K.gguf`;
const apiKey = 'sk-lumen-sdk-test';
let server;
let client;
let modelId;

// Starts lumen serve on a free port (--port 0: it prints the port) and waits until ready.
async function startServer() {
  const args = ['serve', '-m', modelPath, '--port', '0', '-t', '1', '-c', '512', '--max-seqs', '4',
                '--api-key', apiKey, '--embeddings', '--alias', 'tiny-stories'];
  server = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lumen serve did not start:\n${log}`)), 60000);
    server.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    server.on('exit', (code) => reject(new Error(`lumen serve exited (${code}):\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) return base;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`lumen serve never became ready:\n${log}`);
}

before(async () => {
  const base = await startServer();
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60000 });
});

after(() => { if (server) server.kill('SIGTERM'); });

test('models.list and models.retrieve (by alias and by file name); 404 is NotFoundError', async () => {
  const list = await client.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.deepEqual(ids, ['tiny-stories']);
  modelId = ids[0];
  assert.equal((await client.models.retrieve('tiny-stories')).id, 'tiny-stories');
  assert.equal((await client.models.retrieve('stories260K')).id, 'tiny-stories');
  assert.equal((await client.models.retrieve('stories260K.gguf')).id, 'tiny-stories');
  await assert.rejects(client.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404 &&
                       e.code === 'model_not_found');
});

test('a wrong API key is AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

test('chat completion, whole and streamed, agree at temperature 0', async () => {
  const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];
  const whole = await client.chat.completions.create({ model: 'tiny-stories', messages, max_tokens: 16, temperature: 0 });
  const text = whole.choices[0].message.content;
  assert.ok(text.length > 0);
  assert.ok(whole.usage.completion_tokens > 0);
  const stream = await client.chat.completions.create({ model: 'tiny-stories', messages, max_tokens: 16, temperature: 0,
                                                        stream: true, stream_options: { include_usage: true } });
  let streamed = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      streamed += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(streamed, text);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('completions with n = 2 and logprobs', async () => {
  const r = await client.completions.create({ model: 'tiny-stories', prompt: 'Once upon a time', max_tokens: 8, n: 2,
                                              logprobs: 2, seed: 7 });
  assert.equal(r.choices.length, 2);
  assert.ok(r.choices[0].logprobs.tokens.length > 0);
});

test('response_format json_schema: the output parses and validates', async () => {
  const schema = {
    type: 'object',
    properties: { happy: { type: 'boolean' }, mood: { type: 'string', enum: ['calm', 'glad', 'sad'] } },
    required: ['happy', 'mood'],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'tiny-stories', messages: [{ role: 'user', content: 'How is the cat?' }], max_tokens: 48, temperature: 1,
      seed, response_format: { type: 'json_schema', json_schema: { name: 'cat', schema, strict: true } },
    });
    const obj = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(obj).sort(), ['happy', 'mood']);
    assert.equal(typeof obj.happy, 'boolean');
    assert.ok(['calm', 'glad', 'sad'].includes(obj.mood));
  }
});

test('embeddings.create: base64 (the SDK default) and float, one and many inputs', async () => {
  const one = await client.embeddings.create({ model: 'tiny-stories', input: 'The cat sat on the mat.' });
  assert.equal(one.data.length, 1);
  const v = one.data[0].embedding;
  assert.ok(Array.isArray(v) && v.length > 0);
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
  assert.ok(one.usage.prompt_tokens > 0);
  const many = await client.embeddings.create({ model: 'tiny-stories', encoding_format: 'float',
                                                input: ['A dog.', 'The cat sat on the mat.', 'A bird sang.'] });
  assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2]);
  const w = many.data[1].embedding;
  assert.equal(w.length, v.length);
  for (let i = 0; i < v.length; i++) assert.ok(Math.abs(v[i] - w[i]) < 1e-5, `dim ${i}: ${v[i]} vs ${w[i]}`);
  await assert.rejects(client.embeddings.create({ model: 'tiny-stories', input: 'x', dimensions: 3 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
});

// Tool calling round trip, streamed: a forced call (tool_choice names the function) comes as
// tool_call deltas whose arguments assemble into JSON that fits the tool's schema; the tool's
// result goes back as a role "tool" message and the model answers.
test('tool calling round trip with streaming', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
                    additionalProperties: false },
    },
  }];
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const stream = await client.chat.completions.create({
    model: 'tiny-stories', messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
    max_tokens: 64, temperature: 0.7, seed: 5, stream: true,
  });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const d of c.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: '', name: '', arguments: '' };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].name += d.function.name;
        if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.ok(calls[0].id.length > 0);
  const args = JSON.parse(calls[0].arguments);
  assert.deepEqual(Object.keys(args), ['city']);
  assert.equal(typeof args.city, 'string');

  const followUp = await client.chat.completions.create({
    model: 'tiny-stories', tools, max_tokens: 12, temperature: 0, stream: true,
    messages: [...messages,
      { role: 'assistant', content: null,
        tool_calls: [{ id: calls[0].id, type: 'function', function: { name: 'get_weather', arguments: calls[0].arguments } }] },
      { role: 'tool', tool_call_id: calls[0].id, content: '{"temperature_c": 21, "sky": "clear"}' }],
  });
  let answered = false;
  for await (const chunk of followUp) {
    for (const c of chunk.choices) if (c.finish_reason) answered = true;
  }
  assert.ok(answered);
});
