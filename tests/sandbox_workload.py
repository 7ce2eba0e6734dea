"""Ordinary programs that model code runs in ``PythonSandbox``: each cell must still work under the
seccomp allow-list (``mojax/rollout/tools/_seccomp.py``).

Used twice: ``test_tools_seccomp_sandbox.py`` runs every cell in a real bwrap sandbox and checks
that it prints ``ok <name>``, and ``benchmarks/sandbox_syscalls.py`` runs them under strace to list
the system calls they make (how the allow-list was measured). Standard library only, apart from
``LIBRARIES`` (numpy, sympy: run where the interpreter has them). Nothing here leaves the sandbox's
network namespace: sockets talk to its own loopback.
"""

IMPORTS = """
import abc, argparse, array, ast, asyncio, base64, binascii, bisect, bz2, calendar, cmath, codecs
import collections, concurrent.futures, contextlib, copy, csv, ctypes, dataclasses, datetime
import decimal, difflib, dis, email, enum, errno, fcntl, fnmatch, fractions, functools, gc, glob
import gzip, hashlib, heapq, hmac, html, http.client, inspect, io, ipaddress, itertools, json
import keyword, linecache, locale, logging, lzma, math, mmap, multiprocessing, numbers, operator
import os, pathlib, pickle, platform, pprint, queue, random, re, resource, secrets, select
import selectors, shlex, shutil, signal, socket, sqlite3, ssl, statistics, string, struct
import subprocess, sys, sysconfig, tarfile, tempfile, textwrap, threading, time, timeit, tokenize
import traceback, types, typing, unicodedata, unittest, urllib.parse, uuid, warnings, weakref
import xml.etree.ElementTree, zipfile, zlib, pwd, grp, termios
print('ok imports')
"""

FILES = """
import os, shutil, tempfile, mmap, fcntl, pathlib, glob
os.makedirs('a/b/c', exist_ok=True)
with open('a/b/c/f.txt', 'w') as f:
    f.write('hello\\n' * 100)
    f.flush()
    os.fsync(f.fileno())
    os.fdatasync(f.fileno())
with open('a/b/c/f.txt', 'r+b') as f:
    f.seek(6)
    assert f.read(5) == b'hello'
    f.truncate(60)
    fcntl.flock(f, fcntl.LOCK_EX)
    fcntl.lockf(f, fcntl.LOCK_UN)
    m = mmap.mmap(f.fileno(), 0)
    assert m[:5] == b'hello'
    m.close()
os.truncate('a/b/c/f.txt', 12)
st = os.stat('a/b/c/f.txt')
assert st.st_size == 12 and os.lstat('a').st_mode
os.chmod('a/b/c/f.txt', 0o600)
os.utime('a/b/c/f.txt', (1, 2))
os.symlink('a/b/c/f.txt', 'link')
assert os.readlink('link') == 'a/b/c/f.txt' and open('link').read() == 'hello\\nhello\\n'
os.link('a/b/c/f.txt', 'hard')
os.rename('hard', 'hard2')
os.replace('hard2', 'hard3')
os.unlink('hard3')
shutil.copy('a/b/c/f.txt', 'copy.txt')
shutil.copyfile('a/b/c/f.txt', 'copy2.txt')
shutil.copytree('a', 'tree')
shutil.move('tree', 'tree2')
assert sorted(os.listdir('tree2/b/c')) == ['f.txt']
assert len(list(os.walk('.'))) >= 4 and glob.glob('**/*.txt', recursive=True)
with os.scandir('.') as it:
    assert any(e.is_dir() for e in it)
shutil.rmtree('tree2')
os.mkfifo('fifo')
os.remove('fifo')
os.access('copy.txt', os.R_OK)
fd = os.open('x.bin', os.O_CREAT | os.O_RDWR, 0o644)
os.posix_fallocate(fd, 0, 4096)
os.pwrite(fd, b'abc', 10)
assert os.pread(fd, 3, 10) == b'abc'
os.writev(fd, [b'1', b'2'])
os.lseek(fd, 0, 0)
os.readv(fd, [bytearray(4)])
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
fd2 = os.dup(fd)
os.dup2(fd, 100)
os.close(100)
os.close(fd2)
out = os.open('sent.bin', os.O_CREAT | os.O_WRONLY)
os.sendfile(out, fd, 0, 13)
os.close(out)
os.close(fd)
r, w = os.pipe()
os.write(w, b'pipe')
assert os.read(r, 4) == b'pipe'
os.set_blocking(r, False)
os.close(r)
os.close(w)
os.statvfs('/tmp')
with tempfile.TemporaryDirectory() as d, tempfile.NamedTemporaryFile(dir=d) as t:
    t.write(b'x')
    pathlib.Path(d, 'p').write_text('p')
os.chdir('a')
os.chdir('..')
os.getcwd()
os.umask(0o022)
print('ok files')
"""

THREADS = """
import threading, queue, time, concurrent.futures
lock, cond, ev, sem = threading.Lock(), threading.Condition(), threading.Event(), threading.Semaphore(2)
q = queue.Queue()
def work(i):
    with lock, sem:
        q.put(i * i)
    with cond:
        cond.notify_all()
    ev.wait(0.01)
    return i
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert sorted(q.get() for _ in range(8)) == [i * i for i in range(8)]
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    assert sum(ex.map(work, range(20))) == 190
local = threading.local()
local.x = 1
timer = threading.Timer(0.01, ev.set)
timer.start()
assert ev.wait(2)
barrier = threading.Barrier(2)
t = threading.Thread(target=barrier.wait)
t.start()
barrier.wait()
t.join()
print('ok threads')
"""

PROCESSES = """
import os, sys, subprocess, signal, multiprocessing as mp
pid = os.fork()
if pid == 0:
    os._exit(3)
assert os.waitpid(pid, 0)[1] >> 8 == 3
assert subprocess.run(['sh', '-c', 'echo hi'], capture_output=True, text=True).stdout == 'hi\\n'
p = subprocess.run([sys.executable, '-I', '-c', 'import sys; print(sys.version_info[0])'],
                   capture_output=True, text=True, timeout=20)
assert p.stdout.strip() == '3', p
assert os.system('true') == 0
assert os.popen('echo popen').read() == 'popen\\n'
pid = os.posix_spawn('/bin/sh', ['sh', '-c', 'exit 5'], {})
assert os.waitpid(pid, 0)[1] >> 8 == 5
p = subprocess.Popen(['cat'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert p.communicate(b'piped', timeout=10)[0] == b'piped'
p = subprocess.Popen(['sleep', '10'])
p.send_signal(signal.SIGTERM)
assert p.wait(10) == -signal.SIGTERM
for method in ('fork', 'spawn', 'forkserver'):
    ctx = mp.get_context(method)
    if method == 'fork':
        with ctx.Pool(2) as pool:
            assert pool.map(abs, range(-5, 5)) == [abs(x) for x in range(-5, 5)]
    q = ctx.Queue()
    child = ctx.Process(target=q.put, args=(method,))
    child.start()
    assert q.get(timeout=20) == method
    child.join(20)
    assert child.exitcode == 0, (method, child.exitcode)
    q.close()
    del q  # its semaphores are unlinked now, not reported as leaked when the call exits
lock = mp.Lock()
with lock:
    pass
value = mp.Value('i', 7)
assert value.value == 7
from multiprocessing import shared_memory
shm = shared_memory.SharedMemory(create=True, size=4096)
shm.buf[:2] = b'hi'
shm.close()
shm.unlink()
print('ok processes')
"""

SHELL = r"""
import subprocess
script = '''
set -e
mkdir -p d/e && cd d && printf 'b\na\nc\n' > f.txt
sort f.txt | head -n 2 | tail -n 1 | grep -q b
sed 's/a/z/' f.txt | cut -c1 | uniq | wc -l | grep -q 3
cp -r e e2 && mv e2 e3 && rm -rf e3 && ln -s f.txt l && readlink -f l > /dev/null
cat l | tee t.txt | tr a-z A-Z > u.txt && cmp -s f.txt t.txt
find . -name '*.txt' | xargs ls -la > /dev/null
tar czf a.tgz f.txt && gzip -dc a.tgz | tar t > /dev/null
touch g && chmod 600 g && stat g > /dev/null && du -s . > /dev/null && df /tmp > /dev/null
date > /dev/null && id > /dev/null && uname -a > /dev/null && env > /dev/null && nproc > /dev/null
seq 1 5 | paste -sd+ | cut -c1-3 > /dev/null && expr 2 + 3 > /dev/null && test -f f.txt
dd if=/dev/zero of=z bs=1k count=4 2> /dev/null && sleep 0.05 && timeout 5 true
echo done
'''
p = subprocess.run(['sh', '-c', script], capture_output=True, text=True, timeout=30)
assert p.returncode == 0 and p.stdout == 'done\n', (p.returncode, p.stdout, p.stderr)
print('ok shell')
"""

COMPUTE = """
import math, cmath, decimal, fractions, statistics, random, json, pickle, zlib, bz2, lzma
import hashlib, hmac, sqlite3, re, datetime, itertools, functools, collections, csv, io, struct
assert math.isclose(sum(math.sin(x) ** 2 + math.cos(x) ** 2 for x in range(100)), 100)
assert abs(cmath.exp(1j * math.pi) + 1) < 1e-12
decimal.getcontext().prec = 50
assert str(decimal.Decimal(2).sqrt())[:10] == '1.41421356'
assert fractions.Fraction(1, 3) + fractions.Fraction(1, 6) == fractions.Fraction(1, 2)
assert statistics.median([3, 1, 2]) == 2 and 2 ** 4000 % 7 == 2
random.seed(0)
data = {'a': [random.random() for _ in range(100)], 'b': 'π'}
assert json.loads(json.dumps(data)) == data and pickle.loads(pickle.dumps(data)) == data
blob = json.dumps(data).encode()
assert zlib.decompress(zlib.compress(blob)) == blob == bz2.decompress(bz2.compress(blob))
assert lzma.decompress(lzma.compress(blob)) == blob
hashlib.sha256(blob).hexdigest(), hashlib.md5(blob).digest(), hmac.new(b'k', blob, 'sha1')
db = sqlite3.connect(':memory:')
db.execute('create table t (x integer)')
db.executemany('insert into t values (?)', [(i,) for i in range(100)])
assert db.execute('select sum(x) from t').fetchone() == (4950,)
disk = sqlite3.connect('db.sqlite')
disk.execute('create table t (x)')
disk.commit()
disk.close()
assert re.findall(r'\\d+', 'a1b22c333') == ['1', '22', '333']
datetime.datetime.now().isoformat(), datetime.datetime.now(datetime.timezone.utc)
list(itertools.permutations(range(6)))
functools.reduce(lambda a, b: a * b, range(1, 50))
csv.writer(io.StringIO()).writerow([1, 2])
struct.pack('<dQ', 1.0, 2)
print('ok compute')
"""

SOCKETS = """
import asyncio, os, select, selectors, socket, threading
def echo_once(server):
    conn, _ = server.accept()
    with conn:
        conn.sendall(conn.recv(64))
def tcp(family, host):
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, 0))
        server.listen()
        t = threading.Thread(target=echo_once, args=(server,))
        t.start()
        with socket.create_connection((host, server.getsockname()[1]), timeout=5) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.sendall(b'ping')
            assert c.recv(64) == b'ping'
            c.getpeername(), c.getsockname(), c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        t.join()
tcp(socket.AF_INET, '127.0.0.1')
try:
    tcp(socket.AF_INET6, '::1')
except OSError as e:  # a kernel without IPv6 on loopback: creating the socket is what counts
    print('no ipv6 loopback', e.errno)
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
    a.bind(('127.0.0.1', 0))
    b.sendto(b'udp', a.getsockname())
    assert a.recvfrom(16)[0] == b'udp'
left, right = socket.socketpair()
r, w = os.pipe()
socket.send_fds(left, [b'fd'], [w])
msg, fds, _, _ = socket.recv_fds(right, 16, 1)
os.write(fds[0], b'x')
assert os.read(r, 1) == b'x'
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
    server.bind('sock')
    server.listen()
    t = threading.Thread(target=echo_once, args=(server,))
    t.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect('sock')
        c.sendall(b'unix')
        assert c.recv(16) == b'unix'
    t.join()
assert socket.getaddrinfo('127.0.0.1', 80, flags=socket.AI_ADDRCONFIG)
assert socket.getaddrinfo(None, 80, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
socket.gethostname()
sel = selectors.DefaultSelector()
sel.register(left, selectors.EVENT_READ)
right.send(b'!')
assert sel.select(1)
select.select([left], [], [], 0), select.poll().poll(0)
async def main():
    async def handle(reader, writer):
        writer.write(await reader.read(16))
        await writer.drain()
        writer.close()
    server = await asyncio.start_server(handle, '127.0.0.1', 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection('127.0.0.1', port)
    writer.write(b'async')
    assert await reader.read(16) == b'async'
    writer.close()
    server.close()
    await server.wait_closed()
    proc = await asyncio.create_subprocess_exec('echo', 'aio', stdout=asyncio.subprocess.PIPE)
    assert (await proc.communicate())[0] == b'aio\\n'
    await asyncio.sleep(0.01)
asyncio.run(main())
print('ok sockets')
"""

SYSTEM = """
import os, time, signal, resource, platform, uuid, secrets, locale, sys, ctypes, gc
fired = []
signal.signal(signal.SIGUSR1, lambda *a: fired.append('usr1'))
os.kill(os.getpid(), signal.SIGUSR1)
signal.signal(signal.SIGALRM, lambda *a: fired.append('alarm'))
signal.setitimer(signal.ITIMER_REAL, 0.01)
time.sleep(0.1)
signal.alarm(0)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR2])
assert fired == ['usr1', 'alarm'], fired
time.time(), time.monotonic(), time.perf_counter(), time.process_time(), time.thread_time()
time.localtime(), time.strftime('%c'), time.clock_getres(time.CLOCK_MONOTONIC)
resource.getrlimit(resource.RLIMIT_AS), resource.getrusage(resource.RUSAGE_SELF)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.cpu_count(), os.sched_getaffinity(0), os.getloadavg(), os.uname(), os.times()
os.getpid(), os.getppid(), os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), os.getpgrp()
os.getsid(0), os.getpriority(os.PRIO_PROCESS, 0), os.sched_yield()
os.nice(1)
platform.platform(), platform.machine(), uuid.uuid4(), secrets.token_hex(8), os.urandom(16)
os.getrandom(8)
locale.setlocale(locale.LC_ALL, 'C')
libc = ctypes.CDLL(None)
assert libc.getpid() == os.getpid() and libc.strlen(b'abc') == 3
buf = ctypes.create_string_buffer(64)
ctypes.memmove(buf, b'xyz', 3)
gc.collect()
print('ok system')
"""

# Libraries that model code imports most; run only where the sandbox's interpreter has them.
LIBRARIES = """
import numpy as np, sympy
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 64))
assert np.allclose(a @ np.linalg.inv(a), np.eye(64), atol=1e-8)
np.fft.fft(np.arange(256)).sum(), np.linalg.eigvals(a[:8, :8]), np.sort(rng.integers(0, 9, 100))
x = sympy.symbols('x')
assert sympy.solve(x ** 2 - 4, x) == [-2, 2]
assert sympy.integrate(sympy.sin(x), (x, 0, sympy.pi)) == 2
sympy.simplify(sympy.sin(x) ** 2 + sympy.cos(x) ** 2), sympy.factorint(2 ** 32 + 1)
print('ok libraries')
"""

CELLS = {
    "imports": IMPORTS,
    "files": FILES,
    "threads": THREADS,
    "processes": PROCESSES,
    "shell": SHELL,
    "compute": COMPUTE,
    "sockets": SOCKETS,
    "system": SYSTEM,
}
LIBRARY_MODULES = ("numpy", "sympy")
