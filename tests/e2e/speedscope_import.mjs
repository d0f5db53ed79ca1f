// speedscope_import.mjs — imports a trace file with speedscope's own
// importer (the `speedscope` npm package) and prints what it read as JSON:
//   {"profiles": [{"name": ..., "roots": ["frame", ...],
//                  "samples": [{"frames": ["frame", ...], "weight": w}, ...]},
//                 ...],
//    "warnings": ["line", ...]}
// the outermost frames of each profile's call tree in the order they came
// (for a trace of ranges, the ranges no other range holds), and each
// sample's frame names, outermost first, and its weight (speedscope weighs
// a sample by the time to the next one of its thread, drops a sample of
// weight 0 such as the last, and merges a run of samples with the same
// stack into one).
//
//   node speedscope_import.mjs <speedscope package dir> <trace file>
//
// The package ships speedscope as one browser bundle, whose importers are
// loaded behind a promise (`var X = Promise.resolve().then(() => (init(),
// module))`). This script runs the bundle in a sandbox with inert stand-ins
// for the browser's objects, catches that promise as the bundle creates it,
// and calls the module's importProfileGroupFromText(name, text): the code
// path speedscope takes for a file dropped on its page. Exit status 2 with
// one line on stderr when the bundle is not what this expects.
import fs from 'node:fs'
import path from 'node:path'
import vm from 'node:vm'

function fail(msg) {
  process.stderr.write(`speedscope_import: ${msg}\n`)
  process.exit(2)
}

const [pkg, file] = process.argv.slice(2)
if (!pkg || !file) fail('usage: speedscope_import.mjs <package dir> <trace file>')
const dir = path.join(pkg, 'dist', 'release')
const bundle = fs.existsSync(dir)
  ? fs.readdirSync(dir).find(f => /^speedscope-[A-Z0-9]+\.js$/.test(f))
  : undefined
if (!bundle) fail(`no speedscope bundle in ${dir}`)
let src = fs.readFileSync(path.join(dir, bundle), 'utf8')

// Every lazily loaded module promise of the bundle, handed to us.
const lazy = /var ([A-Za-z_$][\w$]*)=Promise\.resolve\(\)\.then\(\(\)=>\([A-Za-z_$][\w$]*\(\),[A-Za-z_$][\w$]*\)\);/g
let found = 0
src = src.replace(lazy, (m, name) => {
  found++
  return `${m}__modules.push(${name});`
})
if (!found) fail(`${bundle}: no lazily loaded module found (another speedscope version?)`)

// Inert stand-ins: any property, call or construction gives another.
const inert = new Proxy(function () {}, {
  get: (t, k) => (k === Symbol.toPrimitive ? () => '' : k === 'then' ? undefined : inert),
  apply: () => inert,
  construct: () => inert,
  set: () => true,
  has: () => true,
})
const modules = []
const warnings = []
const quiet = {log() {}, warn: (...a) => warnings.push(a.join(' ')), info() {}, debug() {}, error() {}}
const sandbox = {
  __modules: modules,
  console: quiet,
  TextDecoder,
  TextEncoder,
  atob,
  btoa,
  URL,
  setTimeout,
  clearTimeout,
  queueMicrotask,
  performance,
  window: inert,
  document: inert,
  navigator: inert,
  location: inert,
  localStorage: inert,
  requestAnimationFrame: inert,
  addEventListener: inert,
}
sandbox.self = sandbox
try {
  vm.runInNewContext(src, sandbox, {filename: bundle})
} catch (e) {
  // The page's own start-up (rendering into the document) fails here; the
  // modules it set up before that are what we need.
}
let importer
for (const p of modules) {
  try {
    const m = await p
    if (m && typeof m.importProfileGroupFromText === 'function') importer = m
  } catch (e) {
    // another lazily loaded module that needs a real browser
  }
}
if (!importer) fail(`${bundle}: no module with importProfileGroupFromText`)

const text = fs.readFileSync(file, 'utf8')
warnings.length = 0 // the bundle's own start-up, not the file's reading
const group = await importer.importProfileGroupFromText(path.basename(file), text)
if (!group) fail(`speedscope could not import ${file}`)
const out = {profiles: [], warnings}
for (const profile of group.profiles) {
  const samples = []
  profile.samples.forEach((leaf, i) => {
    const frames = []
    for (let node = leaf; node && !node.isRoot(); node = node.parent) frames.push(node.frame.name)
    samples.push({frames: frames.reverse(), weight: profile.weights[i]})
  })
  const roots = profile.getAppendOrderCalltreeRoot().children.map(c => c.frame.name)
  out.profiles.push({name: profile.getName(), roots, samples})
}
process.stdout.write(JSON.stringify(out))
