// taco-train CONFIG.yaml [--set key.path=value ...] [--resume]
int main() { return 0; }
