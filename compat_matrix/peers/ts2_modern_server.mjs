// Modern-era fixture server: TypeScript SDK 2.x (@modelcontextprotocol/server@2.4.0).
//
//   node compat_matrix/peers/ts2_modern_server.mjs          # modern-only (legacy: 'reject')
//   node compat_matrix/peers/ts2_modern_server.mjs --dual   # dual-era (legacy: 'serve')
//
// The SDK is looked up in the peers cache ($MCP_PEERS_DIR/node, default
// <repo>/.peers/node; see peers/install.sh). ESM `import` ignores NODE_PATH,
// so the packages are loaded through a require() rooted at that folder (their
// CommonJS builds) instead of bare imports.
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const peersNode = process.env.MCP_PEERS_DIR
    ? join(resolve(process.env.MCP_PEERS_DIR), 'node')
    : join(here, '..', '..', '.peers', 'node');
const require = createRequire(join(peersNode, 'package.json'));

const { McpServer } = require('@modelcontextprotocol/server');
const { serveStdio } = require('@modelcontextprotocol/server/stdio');
const { z } = require('zod');

const dual = process.argv.includes('--dual');

// serveStdio calls the factory once per connection (after the opening message
// picks the era), so all registration lives here.
function createServer() {
    const server = new McpServer(
        { name: 'ts2-fixture', version: '2.4.0' },
        { instructions: 'Modern TS fixture server for mcp-era-gateway tests.' }
    );

    server.registerTool(
        'echo',
        { description: 'Return the text unchanged.', inputSchema: z.object({ text: z.string() }) },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );

    server.registerTool(
        'add',
        {
            description: 'Add two integers (structured result: {"result": a+b}).',
            inputSchema: z.object({ a: z.number().int(), b: z.number().int() }),
            outputSchema: z.object({ result: z.number().int() })
        },
        async ({ a, b }) => ({
            content: [{ type: 'text', text: String(a + b) }],
            structuredContent: { result: a + b }
        })
    );

    server.registerTool(
        'slow',
        { description: 'Sleep ms milliseconds, then return "done".', inputSchema: z.object({ ms: z.number().int() }) },
        async ({ ms }) => {
            await new Promise(r => setTimeout(r, ms));
            return { content: [{ type: 'text', text: 'done' }] };
        }
    );

    server.registerTool('fail', { description: 'Always fails with a tool error (isError=true).' }, async () => ({
        content: [{ type: 'text', text: 'intentional failure' }],
        isError: true
    }));

    return server;
}

serveStdio(createServer, {
    legacy: dual ? 'serve' : 'reject',
    // Reporting only: e.g. each rejected legacy opening lands here; one line is enough.
    onerror: err => process.stderr.write(`ts2_modern_server: ${err?.message ?? err}\n`)
});
