//! Bounds on one execution: an allocator that refuses (and reports) any single allocation or any
//! live total past a limit while an execution is armed, a watchdog thread that reports an
//! execution running past its time limit, and crash reporting (fatal signals, ASan death) that
//! saves the input being executed. All reporting paths write the input with raw `libc` calls so
//! they work from inside the allocator or a signal handler.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest single allocation an execution may make (bytes).
static MAX_ALLOC: AtomicUsize = AtomicUsize::new(1 << 30);
/// Largest live total an execution may reach (bytes, on top of what was live when it started).
static MAX_LIVE: AtomicUsize = AtomicUsize::new(2 << 30);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static BASE: AtomicUsize = AtomicUsize::new(0);
static ARMED: AtomicBool = AtomicBool::new(false);

/// The input of the running execution (valid while armed), and where to save it on a crash.
static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
static CRASH_DIR: OnceLock<CString> = OnceLock::new();
static TARGET: OnceLock<CString> = OnceLock::new();

/// Execution counter and start time (ms since [`epoch`]) for the watchdog; 0 = idle.
static STARTED_MS: AtomicU64 = AtomicU64::new(0);
static TIME_LIMIT_MS: AtomicU64 = AtomicU64::new(10_000);

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// The global allocator of fuzzing binaries: the system allocator plus the limits above.
pub struct LimitedAlloc;

unsafe impl GlobalAlloc for LimitedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.check(layout.size());
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.check(layout.size());
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            self.check(new_size - layout.size());
            if new_size > MAX_ALLOC.load(Ordering::Relaxed) && ARMED.load(Ordering::Relaxed) {
                die("huge-alloc", b"single allocation over the limit\n");
            }
        }
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

impl LimitedAlloc {
    #[inline]
    fn check(&self, size: usize) {
        if !ARMED.load(Ordering::Relaxed) {
            return;
        }
        if size > MAX_ALLOC.load(Ordering::Relaxed) {
            die("huge-alloc", b"single allocation over the limit\n");
        }
        let live = LIVE.load(Ordering::Relaxed).saturating_add(size);
        if live.saturating_sub(BASE.load(Ordering::Relaxed)) > MAX_LIVE.load(Ordering::Relaxed) {
            die("huge-alloc", b"live memory over the limit\n");
        }
    }
}

/// Sets the limits (bytes for memory, seconds for time).
pub fn set_limits(max_alloc: usize, max_live: usize, time_limit: Duration) {
    MAX_ALLOC.store(max_alloc, Ordering::Relaxed);
    MAX_LIVE.store(max_live, Ordering::Relaxed);
    TIME_LIMIT_MS.store(time_limit.as_millis().max(1) as u64, Ordering::Relaxed);
}

/// Where crash inputs go, and the target name used in their file names. Installs the fatal
/// signal handlers, the ASan death callback (when ASan is loaded) and the watchdog thread.
pub fn install(crash_dir: &std::path::Path, target: &str) {
    let _ = std::fs::create_dir_all(crash_dir);
    let dir = CString::new(crash_dir.to_string_lossy().as_bytes()).unwrap_or_default();
    let _ = CRASH_DIR.set(dir);
    let _ = TARGET.set(CString::new(target).unwrap_or_default());
    epoch();
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: the handlers only call async-signal-safe functions (open/write/close/_exit).
        unsafe {
            // On the alternate stack std sets up, so a stack overflow is reported too.
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE] {
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
            register_asan_callback();
        }
        std::thread::Builder::new()
            .name("fuzz-watchdog".into())
            .spawn(watchdog)
            .expect("watchdog thread");
    });
}

extern "C" fn on_signal(_sig: libc::c_int) {
    die("crash", b"fatal signal\n");
}

extern "C" fn on_asan_death() {
    save_input("asan");
}

/// Registers [`on_asan_death`] with ASan when its runtime is loaded (preloaded).
unsafe fn register_asan_callback() {
    let name = c"__asan_set_death_callback";
    let f = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
    if !f.is_null() {
        let set: extern "C" fn(extern "C" fn()) = std::mem::transmute(f);
        set(on_asan_death);
    }
}

fn watchdog() {
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let start = STARTED_MS.load(Ordering::Relaxed);
        if start == 0 {
            continue;
        }
        let now = epoch().elapsed().as_millis() as u64 + 1;
        if now.saturating_sub(start) > TIME_LIMIT_MS.load(Ordering::Relaxed) {
            die("hang", b"execution past its time limit\n");
        }
    }
}

/// Arms the limits for one execution over `input` (which must stay alive until [`disarm`]).
pub fn arm(input: &[u8]) {
    INPUT_PTR.store(input.as_ptr() as *mut u8, Ordering::SeqCst);
    INPUT_LEN.store(input.len(), Ordering::SeqCst);
    BASE.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    STARTED_MS.store(epoch().elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
    ARMED.store(true, Ordering::SeqCst);
}

/// Whether an execution is running (armed). A panic disarms the memory limits (the hook
/// allocates) but not this.
pub fn armed() -> bool {
    STARTED_MS.load(Ordering::SeqCst) != 0
}

/// Ends the execution armed by [`arm`].
pub fn disarm() {
    ARMED.store(false, Ordering::SeqCst);
    STARTED_MS.store(0, Ordering::SeqCst);
    INPUT_LEN.store(0, Ordering::SeqCst);
    INPUT_PTR.store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// Writes `bytes` to stderr without allocating.
fn raw_stderr(bytes: &[u8]) {
    // SAFETY: writing a valid buffer to fd 2.
    unsafe {
        libc::write(2, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Saves the running input as `<crash_dir>/<kind>-<target>-current` (no allocation).
fn save_input(kind: &str) {
    let (Some(dir), Some(target)) = (CRASH_DIR.get(), TARGET.get()) else {
        return;
    };
    let mut path = [0u8; 4096];
    let mut n = 0;
    for part in [
        dir.as_bytes(),
        b"/",
        kind.as_bytes(),
        b"-",
        target.as_bytes(),
        b"-current",
    ] {
        let take = part.len().min(path.len() - 1 - n);
        path[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    path[n] = 0;
    let ptr = INPUT_PTR.load(Ordering::SeqCst);
    let len = INPUT_LEN.load(Ordering::SeqCst);
    // SAFETY: `path` is NUL-terminated; `ptr..ptr+len` is the armed input, alive until disarm.
    unsafe {
        let fd = libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            0o644,
        );
        if fd >= 0 {
            if !ptr.is_null() {
                libc::write(fd, ptr.cast(), len);
            }
            libc::close(fd);
        }
    }
    raw_stderr(b"sparsetir-fuzz: input saved to ");
    raw_stderr(&path[..n]);
    raw_stderr(b"\n");
}

/// Reports a fatal finding, saves the input and exits with status 70.
fn die(kind: &str, what: &[u8]) -> ! {
    ARMED.store(false, Ordering::SeqCst);
    raw_stderr(b"sparsetir-fuzz: FINDING (");
    raw_stderr(kind.as_bytes());
    raw_stderr(b"): ");
    raw_stderr(what);
    save_input(kind);
    if kind != "crash" && std::env::var_os("SPARSETIR_FUZZ_BACKTRACE").is_some() {
        // Triage aid (allocates; not reached from a signal handler).
        eprintln!("{}", std::backtrace::Backtrace::force_capture());
    }
    // SAFETY: terminating the process without running destructors or allocating.
    unsafe { libc::_exit(70) }
}
