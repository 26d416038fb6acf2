// A legacy client over the deprecated HTTP+SSE transport: the TypeScript SDK
// 1.x (@modelcontextprotocol/sdk) `SSEClientTransport`. It connects, lists the
// tools, calls `echo`, and prints one JSON line {"server", "tools",
// "echo"}; exit 0 iff that worked.
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

const url = new URL(process.argv[2]);
const client = new Client({ name: 'ts1-sse-client', version: '1.0.0' });
const transport = new SSEClientTransport(url);
// Every wait is bounded: the whole run, however it goes.
const deadline = setTimeout(() => {
    process.stderr.write('timed out\n');
    process.exit(3);
}, 60000);
try {
    await client.connect(transport);
    const tools = await client.listTools();
    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
    const out = {
        server: client.getServerVersion()?.name ?? null,
        tools: tools.tools.map((t) => t.name).sort(),
        echo: echo.content.filter((c) => c.type === 'text').map((c) => c.text),
    };
    process.stdout.write(JSON.stringify(out) + '\n');
    await client.close();
    clearTimeout(deadline);
} catch (err) {
    process.stderr.write(`${err?.stack ?? err}\n`);
    process.exit(1);
}
