"""JavaScript used by the V8 security tests: a walk over every object a transform can
reach through the global object and the hidden intrinsics (iterator, generator and
async-function prototypes ...), once to patch each one and once to look for patches.

A uniquely named module (not `conftest`): test folders import helpers by file name.
"""

from __future__ import annotations

# Every root a transform can reach without help from its inputs.  Each line creates a
# fresh object whose prototype chain leads into shared intrinsics.
ROOTS = r"""
const gen = function* () {};
const agen = async function* () {};
const seg = typeof Intl.Segmenter === 'function' ? new Intl.Segmenter().segment('a b') : null;
const roots = [
  globalThis, Object.getPrototypeOf(globalThis), gen, gen(), agen, agen(), async function () {}, () => 1,
  (async () => 1)(), [][Symbol.iterator](), [].entries(), new Map()[Symbol.iterator](), new Set().values(),
  ''[Symbol.iterator](), /a/g[Symbol.matchAll]('aa'), 'aa'.matchAll(/a/g), new Uint8Array(2).values(),
  Iterator.prototype.map.call([1].values(), (x) => x), Iterator.from({ next() { return { done: true }; } }),
  seg, seg && seg[Symbol.iterator](), (function () { return arguments; })(1),
  Object.getOwnPropertyDescriptor(Function.prototype, 'caller'), new Error('e'), /x/, Symbol('s'),
  new WeakRef({}), Object.create(null), { a: [1, { b: 2 }] }, new Date(0), new Proxy({}, {}),
  new DisposableStack(), new Intl.Locale('en'), new DataView(new ArrayBuffer(1)), new SharedArrayBuffer(1),
  new Intl.NumberFormat('en'), new Intl.DateTimeFormat('en'), Object(1n), Object(Symbol('b')),
];
const ownKeys = Reflect.ownKeys;
const getDesc = Object.getOwnPropertyDescriptor;
const getProto = Object.getPrototypeOf;
const apply = Reflect.apply;
const visit = (fn) => {
  const seen = new Set();
  const stack = roots.map((r, i) => [r, 'root' + i]);
  while (stack.length) {
    const [o, path] = stack.pop();
    if ((typeof o !== 'object' && typeof o !== 'function') || o === null || seen.has(o)) continue;
    seen.add(o);
    fn(o, path);
    let keys = [];
    try { keys = ownKeys(o); } catch (e) { keys = []; }
    for (const k of keys) {
      let d;
      try { d = getDesc(o, k); } catch (e) { continue; }
      if (!d) continue;
      for (const v of [d.value, d.get, d.set]) stack.push([v, path + '.' + String(k)]);
    }
    let p = null;
    try { p = getProto(o); } catch (e) { p = null; }
    stack.push([p, path + '.__proto__']);
  }
  return seen.size;
};
"""

# Patch everything: add a marker property, replace every writable function-valued
# property by a recording wrapper, redefine accessors, and keep a log on the array
# iterator prototype where a later call could read it back.
PATCH = ROOTS + r"""
const log = [];
const marker = Symbol.for('aromcp.patched');
const all = [];
const n = visit((o, path) => { all.push([o, path]); });  // collect first: never walk our own spies
for (let i = 0; i < all.length; i++) {
  const o = all[i][0];
  const path = all[i][1];
  try { o.__patched = path; } catch (e) {}
  try { o[marker] = path; } catch (e) {}
  let keys = [];
  try { keys = ownKeys(o); } catch (e) {}
  for (let j = 0; j < keys.length; j++) {
    const k = keys[j];
    const d = getDesc(o, k);
    if (!d) continue;
    if (typeof d.value === 'function' && d.writable) {
      const orig = d.value;
      const spy = function (...args) { if (log.length < 1000) log[log.length] = k; return apply(orig, this, args); };
      try { spy.__patched = path; } catch (e) {}
      try { o[k] = spy; } catch (e) {}
    } else if (d.get && d.configurable) {
      const get = d.get;
      const spy = function () { if (log.length < 1000) log[log.length] = k; return apply(get, this, []); };
      try { spy.__patched = path; } catch (e) {}
      try { Object.defineProperty(o, k, { get: spy, set: d.set, configurable: true }); } catch (e) {}
    }
  }
}
try { Object.getPrototypeOf([][Symbol.iterator]()).recorded = log; } catch (e) {}
return { objects: n };
"""

# Look for any trace of a patch; also iterate a secret (the input) in every common way.
CHECK = ROOTS + r"""
const marker = Symbol.for('aromcp.patched');
const found = [];
visit((o, path) => {
  let own = [];
  try { own = ownKeys(o); } catch (e) {}
  if (own.includes('__patched') || own.includes(marker) || own.includes('recorded')) found.push(path);
});
const secret = input;
for (const x of secret) found.length;
[...new Map([[secret[0], 1]]).keys(), ...new Set(secret), ...secret.join(',')];
Array.from(secret.entries()).map(([i, x]) => x).filter(Boolean);
return { found: found, n: found.length };
"""

READ_BACK = r"""
const proto = Object.getPrototypeOf([][Symbol.iterator]());
const log = proto.recorded;
return { recorded: Array.isArray(log) ? log.slice(0, 50).map(String) : null, next: String(proto.next).slice(0, 60) }
"""
