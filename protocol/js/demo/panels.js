// @ts-check
/**
 * The demo page's panels for the chat shown: routine runs (progress, their questions
 * answered inline, cancel), settings/memories requests (a form from the category's JSON
 * Schema), the model's proposals and suggested entries.
 */

import { $, button, el, page, panelNodes, panels, routines } from '/demo/page.js';

/** The current chat's routine runs: progress, the question answered inline, cancel. */
export function renderRoutines() {
  $('#routines').replaceChildren(...[...routines.values()].filter((r) => r.chat_id === page.current).map((r) => {
    const card = el('div', { cls: 'panel routine', testid: 'routine-progress' });
    card.dataset.runId = r.run_id;
    card.dataset.state = r.state;
    const head = el('header');
    const status = r.state === 'finished' ? `finished (${r.outcome})` : r.status ?? (r.state === 'waiting' ? 'waiting for you' : 'running');
    head.append(el('b', { text: r.routine || 'Routine' }), el('span', { cls: 'status', text: status }));
    if (r.state !== 'finished') head.append(button('Cancel', () => page.client?.cancelRoutine(r.run_id), 'routine-cancel'));
    card.append(head, ...r.information.map((t) => el('div', { cls: 'meta', text: t })), ...r.errors.map((t) => el('div', { cls: 'note', text: t })));
    if (r.state === 'waiting' && r.question) {
      const form = el('form', { cls: 'ask' });
      const input = /** @type {HTMLInputElement} */ (el('input', { testid: 'routine-answer' }));
      input.setAttribute('aria-label', r.question);
      form.append(el('label', { text: r.question, testid: 'routine-question' }), input, el('button', { text: 'Answer' }));
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        if (page.client && input.value.trim()) {
          answerRoutine(input.value.trim());
          input.value = '';
        }
      });
      card.append(form);
    }
    return card;
  }));
}

/** A routine's answer is the user's next message in the chat. @param {string} text */
function answerRoutine(text) {
  if (page.client && page.current) page.client.answerRoutine(page.current, text);
}

/** The current chat's settings/memories requests, proposals and suggested entries. */
export function renderPanels() {
  for (const id of panelNodes.keys()) if (!panels.has(id)) panelNodes.delete(id);
  $('#dialogs').replaceChildren(...[...panels.entries()].filter(([, p]) => p.chat_id === page.current).map(([id, p]) => {
    // Kept while shown, so what the user typed stays.
    const made = panelNodes.get(id) ?? panelNode(id, p);
    panelNodes.set(id, made);
    return made;
  }));
}

/** @param {string} id @param {{kind: string, chat_id: string, data: any}} p @returns {HTMLElement} */
function panelNode(id, p) {
  {
    if (p.kind === 'request') return settingsDialog(p.data);
    const box = el('div', { cls: 'panel', testid: p.kind === 'proposal' ? 'memory-proposal' : 'memory-suggestion' });
    const drop = () => { panels.delete(id); renderPanels(); };
    if (p.kind === 'proposal') {
      const d = p.data;
      box.append(el('div', { text: `The assistant proposes to ${d.action} in ${d.app_id} · ${d.category}:` }), el('pre', { text: JSON.stringify(d.entry, null, 1) }),
        button('Accept', () => { page.client?.answerProposal(d.proposal_id, true); drop(); }, 'proposal-accept'),
        button('Decline', () => { page.client?.answerProposal(d.proposal_id, false); drop(); }, 'proposal-decline'));
    } else {
      const s = p.data;
      box.dataset.hash = s.hash;
      box.append(el('div', { text: `Remember “${s.suggested_title}” (${s.app_id} · ${s.item_type})?` }), el('pre', { text: JSON.stringify(s.item_value, null, 1) }),
        button('Never suggest this', () => page.client?.rejectSuggestion(p.chat_id, s), 'memory-reject'), button('Dismiss', drop));
    }
    return box;
  }
}

/**
 * A `request_app_settings_memories` dialog: per category a form from its JSON Schema when
 * the request carries one (`schemas`), else a JSON text area; empty means "not this one".
 * @param {any} r
 */
function settingsDialog(r) {
  const form = el('form', { cls: 'panel', testid: 'settings-dialog' });
  form.dataset.requestId = r.request_id;
  const error = el('div', { cls: 'note' });
  form.append(el('div', { text: 'The assistant asks for your saved settings and memories (shared with this chat only):' }));
  /** @type {(() => any)[]} */
  const readers = r.requested_keys.map((/** @type {string} */ key) => {
    const [app, category] = key.split(/[:-]/, 2);
    const field = el('fieldset');
    field.append(el('legend', { text: `${app} · ${category}` }));
    form.append(field);
    const schema = r.schemas?.[key];
    const read = schema?.properties ? schemaFields(field, schema) : jsonField(field, key);
    return () => {
      const v = read();
      return (Array.isArray(v) ? v : v == null ? [] : [v]).map((content) => ({ app_id: app, item_key: category, content }));
    };
  });
  form.append(button('Share', () => {
    try {
      page.client?.confirmSettings(r.chat_id, r.request_id, readers.flatMap((read) => read()));
    } catch (e) {
      error.textContent = String(/** @type {Error} */ (e).message);
    }
  }, 'settings-confirm'), button('Decline', () => page.client?.declineSettings(r.chat_id, r.request_id), 'settings-decline'), error);
  return form;
}

/** @param {HTMLElement} field @param {string} key @returns {() => any} */
function jsonField(field, key) {
  const area = /** @type {HTMLTextAreaElement} */ (el('textarea'));
  area.dataset.key = key;
  area.rows = 3;
  area.placeholder = 'One entry as JSON, e.g. {"name": "value"} (empty: none)';
  field.append(area);
  return () => (area.value.trim() ? JSON.parse(area.value) : null);
}

/** Inputs for an object schema's properties. @param {HTMLElement} field @param {any} schema @returns {() => any} */
function schemaFields(field, schema) {
  const inputs = Object.entries(schema.properties).filter(([name]) => name !== 'id').map(([name, /** @type {any} */ p]) => {
    const input = /** @type {HTMLInputElement|HTMLSelectElement} */ (el(p.enum ? 'select' : 'input'));
    if (p.enum) /** @type {HTMLSelectElement} */ (input).append(...['', ...p.enum].map((v) => Object.assign(el('option', { text: v }), { value: v })));
    else if (p.type === 'integer' || p.type === 'number') /** @type {HTMLInputElement} */ (input).type = 'number';
    input.name = name;
    const label = el('label', { text: name });
    label.append(input);
    field.append(label);
    return input;
  });
  return () => {
    /** @type {any} */
    const out = {};
    for (const i of inputs) if (i.value !== '') out[i.name] = /** @type {HTMLInputElement} */ (i).type === 'number' ? Number(i.value) : i.value;
    return Object.keys(out).length ? out : null;
  };
}
