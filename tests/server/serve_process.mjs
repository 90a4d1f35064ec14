// Starts `strata serve` on a free port for the Node tests and stops it again.
// startServer(strata, ckptDir, extraArgs) -> { port, pid, baseURL, stop(), rssKiB(), stderr() }
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

export async function startServer(strata, ckpt, extra = []) {
  const args = ['serve', '-m', ckpt, '--port', '0', '--test-scripted-output', ...extra];
  const child = spawn(strata, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const ready = new Promise((resolve, reject) => {
    let port = 0;
    const timer = setTimeout(() => reject(new Error('strata serve did not get ready in 120 s:\n' + err)), 120000);
    child.stderr.on('data', (d) => {
      err += d.toString();
      const m = err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) port = Number(m[1]);
      if (port && /ready in/.test(err)) {
        clearTimeout(timer);
        resolve(port);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`strata serve exited (${code}) before it was ready:\n${err}`));
    });
  });
  const port = await ready;
  child.removeAllListeners('exit');
  return {
    port,
    pid: child.pid,
    baseURL: `http://127.0.0.1:${port}/v1`,
    stderr: () => err,
    rssKiB: () => {
      const m = readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
      return m ? Number(m[1]) : 0;
    },
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve(child.exitCode);
        child.on('exit', (code) => resolve(code));
        child.kill('SIGTERM');
      }),
  };
}

// The value of one Prometheus sample in GET /metrics (first match), or NaN.
export async function metric(port, name) {
  const body = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const m = body.match(new RegExp(`^${name.replace(/[{}"]/g, (c) => '\\' + c)} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

export async function waitMetric(port, name, want, ms = 30000) {
  const end = Date.now() + ms;
  let v = await metric(port, name);
  while (v !== want && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 20));
    v = await metric(port, name);
  }
  return v;
}
