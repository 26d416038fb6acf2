// A legacy client using 2025-11-25 tasks itself: the TypeScript SDK 1.x
// (@modelcontextprotocol/sdk) `client.experimental.tasks`, over stdio to the
// command given (the gateway in front of a modern server with the tasks
// extension, issue #16). It streams a task-augmented call to `slow_compute`
// and to `confirm_delete` (answering its elicitation with confirm: true),
// lists its tasks, cancels a long one, and prints one JSON line.
//
//   node tests/servers/ts1_tasks_client.mjs COMMAND [ARG...]
//
// The SDK is loaded from .peers/node (ESM ignores NODE_PATH).
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', '..', '.peers', 'node', 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { CallToolResultSchema, ElicitRequestSchema } = require('@modelcontextprotocol/sdk/types.js');

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: 'ts1-tasks-client', version: '1.0.0' }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { confirm: true } }));
// Every wait is bounded: the whole run, however it goes.
const deadline = setTimeout(() => {
    process.stderr.write('timed out\n');
    process.exit(3);
}, 90000);

async function stream(name, args) {
    const seen = [];
    let text = null;
    for await (const m of client.experimental.tasks.callToolStream({ name, arguments: args }, CallToolResultSchema)) {
        if (m.type === 'result') text = m.result.content.map((c) => c.text).join('');
        else if (m.type === 'error') text = `error: ${m.error?.message}`;
        else seen.push(m.task?.status ?? m.type);
    }
    return { seen: [...new Set(seen)], text };
}

try {
    await client.connect(new StdioClientTransport({ command, args, stderr: 'ignore' }));
    const out = {};
    out.tasks = client.getServerCapabilities()?.tasks ?? null;
    // The SDK augments a call only for a tool it has seen say so (taskSupport).
    const tools = (await client.listTools()).tools;
    out.taskSupport = tools.find((t) => t.name === 'slow_compute')?.execution?.taskSupport ?? null;
    out.slow = await stream('slow_compute', { seconds: 1, label: 'ts' });
    out.confirm = await stream('confirm_delete', { filename: 'a.txt' });
    const long = client.experimental.tasks.callToolStream(
        { name: 'slow_compute', arguments: { seconds: 60 } }, CallToolResultSchema);
    const first = await long.next();
    const cancelled = await client.experimental.tasks.cancelTask(first.value.task.taskId);
    out.cancelled = cancelled.status;
    out.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.status).sort();
    process.stdout.write(JSON.stringify(out) + '\n');
    await client.close();
    clearTimeout(deadline);
} catch (err) {
    process.stderr.write(`${err?.stack ?? err}\n`);
    process.exit(1);
}
