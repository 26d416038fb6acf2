// fixture_data.py for the TS fixture servers (ts1_fixture_server.mjs,
// ts2_fixture_server.mjs): the shared texts and payloads, read from
// fixture_data.json (its export; tests/test_conformance_fixtures.py keeps the
// two in sync), and the helpers that build and read the requests the
// fixtures send, written once for both SDKs.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

// The SDKs come from the peers cache ($MCP_PEERS_DIR/node, default
// <repo>/.peers/node; see peers/install.sh). ESM `import` ignores NODE_PATH,
// so they are loaded through a require() rooted there (CommonJS builds).
const peersNode = process.env.MCP_PEERS_DIR
    ? join(resolve(process.env.MCP_PEERS_DIR), 'node')
    : join(here, '..', '..', '.peers', 'node');
export const requirePeer = createRequire(join(peersNode, 'package.json'));

export const fx = JSON.parse(readFileSync(join(here, 'fixture_data.json'), 'utf8'));

/** An `elicitation/create` (form mode) request, as fixture_data.form() builds it. */
export const form = (message, properties, required) => ({
    method: 'elicitation/create',
    params: { message, requestedSchema: { type: 'object', properties, required } }
});

/** A `sampling/createMessage` request, as fixture_data.sample() builds it. */
export const sample = (text, maxTokens) => ({
    method: 'sampling/createMessage',
    params: { messages: [{ role: 'user', content: { type: 'text', text } }], maxTokens }
});

// fixture_data.answer_text / sampled_text / root_count / elicitation_summary
export const answerText = (answer, field, fallback = 'unknown') => {
    const value = answer?.content?.[field];
    return typeof value === 'string' ? value : fallback;
};
export const sampledText = answer =>
    typeof answer?.content?.text === 'string' ? answer.content.text : 'no response';
export const rootCount = answer => (Array.isArray(answer?.roots) ? answer.roots.length : 0);

/** JSON with Python's json.dumps separators (", " and ": "), so texts match the Python fixtures'. */
export const pyJson = value => {
    if (Array.isArray(value)) return `[${value.map(pyJson).join(', ')}]`;
    if (value !== null && typeof value === 'object') {
        return `{${Object.entries(value)
            .map(([k, v]) => `${JSON.stringify(k)}: ${pyJson(v)}`)
            .join(', ')}}`;
    }
    return JSON.stringify(value ?? null);
};

export const elicitationSummary = answer =>
    `action=${answer?.action}, content=${pyJson(answer?.content ?? {})}`;
