"""The code that runs inside the target: a Frida JavaScript agent and the C it compiles."""
