//! The `heshare` command: see `heshare --help`.

fn main() -> std::process::ExitCode {
    heshare::cli::main()
}
