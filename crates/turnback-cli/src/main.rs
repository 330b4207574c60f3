//! The `turnback` command line: argument parsing and output over the `turnback` library.

mod app;
mod cli;
mod commands;
mod output;

fn main() {
    std::process::exit(app::run());
}
