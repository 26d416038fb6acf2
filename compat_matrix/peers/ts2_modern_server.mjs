// Modern-era fixture server: TypeScript SDK 2.x (@modelcontextprotocol/server@2.4.0).
//
//   node compat_matrix/peers/ts2_modern_server.mjs          # modern-only (legacy: 'reject')
//   node compat_matrix/peers/ts2_modern_server.mjs --dual   # dual-era (legacy: 'serve')
//   node compat_matrix/peers/ts2_modern_server.mjs [--dual] --http PORT
//
// `--http PORT` serves Streamable HTTP at http://127.0.0.1:PORT/mcp with the
// SDK's `createMcpHandler` (a fetch-shaped handler, put behind node:http here
// because `@modelcontextprotocol/node` is not installed): modern-only is
// `legacy: 'reject'`, `--dual` is `legacy: 'stateless'` (every legacy POST is
// served by a fresh instance, so no Mcp-Session-Id; GET/DELETE answer 405).
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

const { McpServer, createMcpHandler, inputRequired, inputResponse } = require('@modelcontextprotocol/server');
const { serveStdio } = require('@modelcontextprotocol/server/stdio');
const { z } = require('zod');
const { createServer: createHttpServer } = require('node:http');

const dual = process.argv.includes('--dual');
const httpAt = process.argv.indexOf('--http');
const httpPort = httpAt >= 0 ? Number(process.argv[httpAt + 1]) : null;

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

    // Multi round-trip tools, same names and answers as the Python fixtures. Each
    // returns inputRequired(...) until the retry carries its answer; on a legacy
    // connection (--dual) the SDK's shim pushes the embedded requests instead.
    // A handler registered without inputSchema gets only ctx.
    const text = t => ({ content: [{ type: 'text', text: t }] });

    server.registerTool(
        'ask_name',
        { description: 'Ask the client for a name (form elicitation), then "Hello, <name>".' },
        async ctx => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'name');
            if (answer.kind === 'elicit') {
                const name = answer.content?.name;
                return answer.action === 'accept' && typeof name === 'string'
                    ? text(`Hello, ${name}`)
                    : text(`No name given (${answer.action})`);
            }
            const requestedSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
            return inputRequired({
                inputRequests: { name: inputRequired.elicit({ message: 'What is your name?', requestedSchema }) }
            });
        }
    );

    server.registerTool(
        'open_link',
        { description: 'Ask the client to open a URL (URL-mode elicitation).' },
        async ctx => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'link');
            if (answer.kind === 'elicit') return text(`URL elicitation: ${answer.action}`);
            return inputRequired({
                inputRequests: {
                    link: inputRequired.elicitUrl({
                        message: 'Please open the link to continue.',
                        url: 'https://example.com/compat/authorize'
                    })
                }
            });
        }
    );

    server.registerTool(
        'summarize',
        { description: "Ask the client's LLM to summarize text (sampling).", inputSchema: z.object({ text: z.string() }) },
        async ({ text: input }, ctx) => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'summary');
            if (answer.kind === 'sampling') {
                const content = answer.result.content;
                return text(content?.type === 'text' ? content.text : JSON.stringify(content));
            }
            const messages = [{ role: 'user', content: { type: 'text', text: `Summarize: ${input}` } }];
            return inputRequired({ inputRequests: { summary: inputRequired.createMessage({ messages, maxTokens: 100 }) } });
        }
    );

    server.registerTool(
        'list_my_roots',
        { description: "Return the client's root URIs joined by newline (roots)." },
        async ctx => {
            const answer = inputResponse(ctx.mcpReq.inputResponses, 'roots');
            if (answer.kind === 'roots') return text(answer.roots.map(r => r.uri).join('\n'));
            return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
        }
    );

    return server;
}

const onerror = err => process.stderr.write(`ts2_modern_server: ${err?.message ?? err}\n`);

// node:http in front of the fetch-shaped handler: the request body is read
// whole, the response (JSON or an SSE stream) is piped back, and a client
// that hangs up aborts the request (the SDK then cancels the call).
function serveHttp(port) {
    const handler = createMcpHandler(createServer, { legacy: dual ? 'stateless' : 'reject', onerror });
    const server = createHttpServer(async (req, res) => {
        const abort = new AbortController();
        res.on('close', () => abort.abort());
        try {
            if (new URL(req.url, 'http://127.0.0.1').pathname !== '/mcp') {
                res.writeHead(404).end();
                return;
            }
            const chunks = [];
            for await (const chunk of req) chunks.push(chunk);
            const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
            const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
                method: req.method,
                headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map(x => [k, x]) : [[k, v]])),
                body: hasBody ? Buffer.concat(chunks) : undefined,
                signal: abort.signal
            });
            const response = await handler.fetch(request);
            res.writeHead(response.status, Object.fromEntries(response.headers));
            if (response.body) {
                for await (const chunk of response.body) res.write(chunk);
            }
            res.end();
        } catch (err) {
            if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(String(err?.message ?? err));
        }
    });
    server.on('error', err => {
        process.stderr.write(`ts2_modern_server: ${err?.code ?? ''} ${err?.message ?? err}\n`);
        process.exit(1);
    });
    server.listen(port, '127.0.0.1');
    for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
}

if (httpPort !== null) {
    serveHttp(httpPort);
} else {
    serveStdio(createServer, {
        legacy: dual ? 'serve' : 'reject',
        // Reporting only: e.g. each rejected legacy opening lands here; one line is enough.
        onerror
    });
}
