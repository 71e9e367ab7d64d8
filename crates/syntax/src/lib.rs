//! Script language: lexer, parser (script text → IR) and diagnostics with source carets.
