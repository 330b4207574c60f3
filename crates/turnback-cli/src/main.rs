//! The `turnback` command line: argument parsing and output over the `turnback` library.

mod app;
mod cli;
mod commands;
mod ctx;
mod output;
mod runtime;

fn main() {
    std::process::exit(app::run());
}
