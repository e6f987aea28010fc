"""toeplitz"""
