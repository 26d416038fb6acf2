// A legacy client over the deprecated HTTP+SSE transport: the TypeScript SDK
// 1.x (@modelcontextprotocol/sdk) `SSEClientTransport` and `Client`. It
// connects, lists the tools, calls `echo`, `progress` (with onprogress),
// `ask_name` (answering the elicitation with {name: "Ada"}), `summarize`
// (answering its sampling request), `list_my_roots` (answering roots/list),
// subscribes to notes://sse and waits for its resources/updated after
// `add_note`, gives up on a `slow` call (an abort: notifications/cancelled),
// and calls `echo` again; between, it sets the log level to warning and calls
// `log_levels`. `progress.seen` is what came on the wire before the
// result, `progress.handed` what the SDK passed to `onprogress`. Prints one JSON line, the same keys as
// tests/servers/py1_sse_client.py; exit 0 iff it got that far.
//
//   node tests/servers/ts1_sse_client.mjs http://HOST:PORT/sse
//
// The SDK is loaded from .peers/node as in compat_matrix/peers/ts2_client.mjs
// (ESM ignores NODE_PATH).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', '..', '.peers', 'node', 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { SSEClientTransport } = require('@modelcontextprotocol/sdk/client/sse.js');
const {
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    ListRootsRequestSchema,
    ResourceUpdatedNotificationSchema,
} = require('@modelcontextprotocol/sdk/types.js');

const ROOT = 'file:///srv/sse-root';
const url = new URL(process.argv[2]);
const client = new Client(
    { name: 'ts1-sse-client', version: '1.0.0' },
    { capabilities: { elicitation: {}, sampling: {}, roots: { listChanged: false } } },
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async () => {
    asked.push('elicitation/create');
    return { action: 'accept', content: { name: 'Ada' } };
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    asked.push('sampling/createMessage');
    const content = request.params.messages[0].content;
    const text = content.type === 'text' ? content.text : '?';
    return {
        role: 'assistant',
        content: { type: 'text', text: `sampled(${text})` },
        model: 'sse-test-model',
    };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
    asked.push('roots/list');
    return { roots: [{ uri: ROOT, name: 'sse' }] };
});
const updated = [];
let onUpdate = () => {};
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
    updated.push(notification.params.uri);
    onUpdate();
});

const texts = (result) => result.content.filter((c) => c.type === 'text').map((c) => c.text);
const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, options);

// Every wait is bounded: the whole run, however it goes.
const deadline = setTimeout(() => {
    process.stderr.write('timed out\n');
    process.exit(3);
}, 90000);
try {
    const transport = new SSEClientTransport(url);
    await client.connect(transport);
    // The SDK hands notifications to their handlers a microtask later but
    // responses at once, so `onprogress` misses a progress notification
    // that arrives in the same read as the result. What the client checks is
    // the wire: the progress notifications that came before the result.
    const wire = [];
    const logged = [];
    const onmessage = transport.onmessage;
    transport.onmessage = (message, extra) => {
        if (message.method === 'notifications/progress') wire.push(message.params.progress);
        if (message.method === 'notifications/message') logged.push(message.params.level);
        onmessage(message, extra);
    };
    const out = { server: client.getServerVersion()?.name ?? null };
    out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
    out.echo = texts(await call('echo', { text: 'hi' }));
    const handed = [];
    const done = await call('progress', { steps: 3 }, {
        onprogress: (p) => handed.push(p.progress),
    });
    out.progress = { text: texts(done), seen: [...wire], handed };
    out.ask_name = texts(await call('ask_name', {}));
    out.summarize = texts(await call('summarize', { text: 'abc' }));
    out.roots = texts(await call('list_my_roots', {}));
    out.asked = asked;
    // A resource subscription: the update comes on the SSE stream.
    const arrived = new Promise((resolve) => {
        onUpdate = resolve;
        setTimeout(resolve, 10000);
    });
    await client.subscribeResource({ uri: 'notes://sse' });
    await call('add_note', { name: 'sse', text: 'one' });
    await arrived;
    out.updated = updated;
    // Logging: the level the client sets holds for what reaches it.
    await client.setLoggingLevel('warning');
    out.log_levels = texts(await call('log_levels', {}));
    out.logged = logged;
    // A call the client gives up on: the SDK sends notifications/cancelled.
    const abort = new AbortController();
    setTimeout(() => abort.abort('gave up'), 500);
    try {
        await call('slow', { ms: 30000 }, { signal: abort.signal });
        out.cancelled = 'answered';
    } catch (err) {
        out.cancelled = String(err?.message ?? err);
    }
    // The session still works after the cancellation.
    out.after_cancel = texts(await call('echo', { text: 'again' }));
    process.stdout.write(JSON.stringify(out) + '\n');
    await client.close();
    clearTimeout(deadline);
} catch (err) {
    process.stderr.write(`${err?.stack ?? err}\n`);
    process.exit(1);
}
